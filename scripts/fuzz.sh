#!/usr/bin/env bash
# Runs every fuzz target for the given number of inputs (default 100000x
# each). A count, not a duration: Go 1.26's fuzz coordinator can fail a
# target that found nothing when a duration's deadline passes
# (go.dev/issue/75804), and a count has no deadline.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
n=${1:-100000x}
[[ $n =~ ^[0-9]+x$ ]] || { echo "usage: scripts/fuzz.sh [COUNTx], e.g. 100000x" >&2; exit 2; }
for pkg in $(go list ./internal/...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "fuzz $pkg $f ($n)"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$n" "$pkg"
	done
done
