#!/usr/bin/env bash
# Runs every fuzz target for the given time (default 10s each).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
t=${1:-10s}
for pkg in $(go list ./internal/...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "fuzz $pkg $f ($t)"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done
