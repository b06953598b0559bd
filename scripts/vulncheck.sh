#!/usr/bin/env bash
# Checks eip against the Go vulnerability database and fails when a known
# vulnerability is reachable from its code, unless scripts/vulncheck.accepted
# lists it with the reason it is accepted. It needs no network beyond the Go
# module proxy: the database is the one pinned in
# testenv/tools/govulncheck/go.mod (golang.org/x/vulndb), indexed once from
# its OSV files into the tool's cache. Bump that pin to check against newer
# advisories.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
bin=$(scripts/build-tool.sh govulncheck | tail -n1)
db="$(dirname "$bin")/db"
if [[ ! -f "$db/index/db.json" ]]; then
	osv=$(cd testenv/tools/govulncheck && GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' golang.org/x/vulndb)/data/osv
	tmp=$(mktemp -d "$(dirname "$bin")/.db.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	"$bin/indexdb" -vulns "$osv" -out "$tmp/db"
	mv "$tmp/db" "$db"
fi
status=0
out=$("$bin/govulncheck" -db "file://$db" ./...) || status=$?
echo "$out"
# 3: vulnerabilities found; anything else but 0 is govulncheck failing.
if ((status != 0 && status != 3)); then
	exit "$status"
fi
# The default report lists only the vulnerabilities reachable from eip's code.
found=$(grep -oE '^Vulnerability #[0-9]+: GO-[0-9]+-[0-9]+' <<<"$out" | awk '{print $3}' | sort -u)
accepted=$(grep -oE '^GO-[0-9]+-[0-9]+' scripts/vulncheck.accepted | sort -u)
open=$(comm -23 <(echo "$found") <(echo "$accepted") | sed '/^$/d')
if [[ -n "$open" ]]; then
	echo "vulncheck: reachable and not accepted in scripts/vulncheck.accepted:" $open >&2
	exit 1
fi
echo "vulncheck: no reachable vulnerability but those accepted"
