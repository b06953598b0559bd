#!/usr/bin/env bash
# make demo: builds the test cluster's binaries if needed (from Go modules,
# cached), then runs the demo program, which brings up a cluster in network
# namespaces, shows eip serving and failing over, and tears it all down.
# Arguments go to the demo program: -bgp shows route mode (make demo-bgp).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
echo "==> building kube-apiserver, etcd and kubectl from Go modules (cached after the first run, ~8 min)"
EIP_K8S_BIN=$(scripts/build-k8s.sh | tail -n1)
export EIP_K8S_BIN EIPD_BIN="$root/bin/eipd" KUBECTL_EIP_BIN="$root/bin/kubectl-eip"
exec env GOFLAGS=-mod=mod go run ./testenv/cmd/demo "$@"
