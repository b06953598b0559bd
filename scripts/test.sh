#!/usr/bin/env bash
# The test tiers of `make test` (testenv/README.md, "Running the tests").
#
#   scripts/test.sh        every tier: unit and privileged tests, chart and
#                          manifests, race, a short fuzz run, govulncheck
#                          (scripts/vulncheck.sh), end-to-end
#   scripts/test.sh unit   every tier but the end-to-end one
#   scripts/test.sh e2e    only the end-to-end tier
#
# It ends with a timing summary: each tier's wall time and test counts, and
# the ten slowest tests (scripts/testlog, which also prints a failed test's
# whole output when it ends).
#
# The tools the tests need are built from their Go modules once and cached
# (scripts/build-tool.sh, scripts/build-k8s.sh). The missing ones are built
# in the background, at a lower priority, while tiers that need none of
# them run: compiling uses the cores the tests leave idle while they wait.
#
# Environment: EIP_E2E_PARALLEL (default 3), how many end-to-end tests run
# at once; EIP_RACE=0 leaves out the race tier.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export GOFLAGS=${GOFLAGS:--mod=mod}
mode=${1:-all}
case $mode in all | unit | e2e) ;; *)
	echo "usage: scripts/test.sh [unit|e2e]" >&2
	exit 2
	;;
esac

work=$(mktemp -d -t eip-test.XXXXXX)
times="$work/times.jsonl"
touch "$times"
go build -o "$work/testlog" ./scripts/testlog

finish() {
	local rc=$?
	"$work/testlog" -summary "$times" || true
	rm -rf "$work"
	exit "$rc"
}
trap finish EXIT

# tier NAME COMMAND...: runs one tier and records its wall time.
tier() {
	local start=$SECONDS rc=0 action=pass
	current=$1
	shift
	echo "== $current"
	"$@" || rc=$?
	((rc == 0)) || action=fail
	printf '{"tier":"%s","action":"%s","seconds":%d}\n' "$current" "$action" $((SECONDS - start)) >>"$times"
	return "$rc"
}

# gotest [-v] ARGS...: go test -json through testlog, which prints
# failures whole (and with -v every test's result line) and records every
# test's time under the current tier.
gotest() {
	local v=()
	if [[ ${1:-} == -v ]]; then
		v=(-v)
		shift
	fi
	go test -json "$@" 2>&1 | "$work/testlog" "${v[@]}" -tier "$current" -record "$times"
}

# build TOOL...: builds each pinned tool (or k8s: the control plane) in
# turn at a low priority, printing only "built …" lines, or the log of a
# build that failed.
build() {
	local t log script
	for t in "$@"; do
		log="$work/build-$t.log" script=(scripts/build-tool.sh "$t")
		[[ $t != k8s ]] || script=(scripts/build-k8s.sh)
		nice -n 10 "${script[@]}" >"$log" 2>&1 || {
			cat "$log"
			return 1
		}
		grep '^built' "$log" || true
	done
}

# wait_build PID LOG: waits for a background build, then shows its output.
wait_build() {
	local rc=0
	wait "$1" || rc=$?
	cat "$2"
	return "$rc"
}

# race runs the race detector (it needs cgo) on the packages whose code
# runs goroutines: the agent's loop with its informer handlers and writers,
# LAN liveness, netlink address events, the lease store, the BGP speaker,
# metrics, the plugin's concurrent reads and the daemon's wiring. -short:
# the race detector slows the agent's long property tests tenfold, and a
# few of their random sequences run the same goroutines.
race() {
	CGO_ENABLED=1 gotest -race -short -timeout 20m -count=1 ./internal/agent/... ./internal/lanlive/... ./internal/netif/... \
		./internal/lease/... ./internal/bgp/... ./internal/metrics/... ./internal/cli/... ./daemon/...
}

# helm and promtool test the chart and the alert rules, promql the
# dashboard's queries; krew and helm are
# also run by the end-to-end suite; k8s is every test cluster's control
# plane, kubelet, containerd and cni the real nodes'.
chart_tools=(helm promtool promql krew)
cluster_tools=(k8s kubelet containerd cni)

# charts runs the tests that need the chart tools: the chart's, the
# manifests' and the release's (it packages the chart with helm).
release_test=TestReleaseCrossReferences
charts() {
	gotest -count=1 ./manifests/... ./charts/... && gotest -count=1 -run "^$release_test\$" ./scripts/
}

if [[ $mode == e2e ]]; then
	tier "test tools" build "${chart_tools[@]}" "${cluster_tools[@]}"
else
	build "${chart_tools[@]}" "${cluster_tools[@]}" >"$work/tools.log" 2>&1 &
	tools=$!
	# Every package but the chart's and the manifests' and the release's
	# test (they run helm and promtool, which may still be building) and
	# testenv's (the end-to-end tier).
	tier "unit and privileged" gotest -count=1 -skip "^$release_test\$" ./internal/... ./daemon/... ./kubectl-eip/... ./scripts/... ./docs/...
	[[ ${EIP_RACE:-1} == 0 ]] || tier "race" race
	tier "fuzz (short)" scripts/fuzz.sh 10000x
	tier "known vulnerabilities" scripts/vulncheck.sh
	tier "test tools (built in the background)" wait_build "$tools" "$work/tools.log"
	tier "chart and manifests" charts
fi
[[ $mode != unit ]] || exit 0

EIP_K8S_BIN=$(scripts/build-k8s.sh | tail -n1)
export EIP_K8S_BIN EIPD_BIN="$root/bin/eipd" KUBECTL_EIP_BIN="$root/bin/kubectl-eip"
# Tests of testenv/e2e run in parallel, each on a cluster of its own (see
# testenv/README.md): three at once on CI's 2 cores.
tier "end-to-end" gotest -v -count=1 -timeout 40m -parallel "${EIP_E2E_PARALLEL:-3}" ./testenv/...
