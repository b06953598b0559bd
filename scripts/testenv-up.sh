#!/usr/bin/env bash
# Brings up a test cluster that stays running: a control plane and nodes in
# network namespaces (see testenv/). Needs root. Arguments go to
# `testenv up`: -nodes N, -daemons (start eipd on every node), -eipd PATH.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/prereqs.sh
EIP_K8S_BIN=$(scripts/build-k8s.sh | tail -n 1)
export EIP_K8S_BIN
exec env GOFLAGS=-mod=mod go run ./testenv/cmd/testenv up "$@"
