#!/usr/bin/env bash
# `make bench`: measures eip against the targets of docs/design.md on a real test
# cluster (testenv/cmd/bench) and prints the table. Raw samples, the table
# and the plot go to results/<time>/ (or -out DIR). Arguments are passed to
# the benchmark, e.g. scripts/bench.sh -quick, or -only failover -reps 50.
# Needs root; builds eipd and kubectl-eip into bin/ first.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export GOFLAGS=${GOFLAGS:--mod=mod}

echo "== test cluster binaries" >&2
EIP_K8S_BIN=$(scripts/build-k8s.sh | tail -n1)
export EIP_K8S_BIN EIPD_BIN="$root/bin/eipd" KUBECTL_EIP_BIN="$root/bin/kubectl-eip"
# The realnodes scenario's kubelet nodes (testenv finds them itself).
for tool in kubelet containerd cni; do scripts/build-tool.sh "$tool" >/dev/null; done
# Build first, so that the benchmark never measures an eipd older than the
# tree (the go build cache makes this quick when nothing changed).
echo "== eipd and kubectl-eip" >&2
make --no-print-directory build >&2

echo "== benchmark" >&2
go build -o "$root/bin/bench" ./testenv/cmd/bench
exec "$root/bin/bench" "$@"
