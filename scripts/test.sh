#!/usr/bin/env bash
# The test tiers of `make test`. With no argument: unit and privileged
# tests, a short fuzz run, then the end-to-end suite on a real API server.
# With "e2e": only the end-to-end suite.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export GOFLAGS=${GOFLAGS:--mod=mod}

# helm and promtool test the chart and the alert rules; krew and helm are
# also run by the e2e suite. Built from their Go modules once, then cached.
echo "== test tools"
for tool in helm krew promtool; do
	scripts/build-tool.sh "$tool" >/dev/null
done

if [[ "${1:-}" != e2e ]]; then
	echo "== unit and privileged tests"
	go test -count=1 ./internal/... ./daemon/... ./kubectl-eip/... ./manifests/... ./charts/... ./scripts/... ./docs/...
	echo "== fuzz (short)"
	scripts/fuzz.sh 5s
fi

echo "== test cluster binaries"
EIP_K8S_BIN=$(scripts/build-k8s.sh | tail -n1)
export EIP_K8S_BIN EIPD_BIN="$root/bin/eipd" KUBECTL_EIP_BIN="$root/bin/kubectl-eip"
# The real kubelet nodes of testenv/e2e/realnodes (testenv finds them itself).
for tool in kubelet containerd cni; do scripts/build-tool.sh "$tool" >/dev/null; done
echo "== end-to-end suite"
# Tests of testenv/e2e run in parallel, each on a cluster of its own (see
# testenv/README.md): three at once on CI's 2 cores.
go test -count=1 -timeout 40m -parallel "${EIP_E2E_PARALLEL:-3}" ./testenv/...
