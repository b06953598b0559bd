#!/usr/bin/env bash
# Tears down the clusters scripts/testenv-up.sh left running (or those named
# by id), and any that a crashed test run left behind.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
exec env GOFLAGS=-mod=mod go run ./testenv/cmd/testenv down "$@"
