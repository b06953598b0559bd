# eip: external IPs for bare-metal Kubernetes.
# Every target runs on a fresh Debian or Ubuntu machine as root: the targets
# that start a test cluster run `prereqs` first, which installs what is
# missing (scripts/prereqs.sh).

GO       ?= go
# The release version lives in the VERSION file alone; builds stamp it and
# the commit into both binaries (eipd --version, kubectl eip version).
VERSION  ?= $(shell cat VERSION)
COMMIT   := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# grpcnotrace: GoBGP links gRPC, whose request tracing pulls in html/template;
# its reflection keeps every method of every type (Kubernetes' API types
# above all) in the binary. Without it eipd is 38 MB instead of 68 MB.
EIPD_TAGS := grpcnotrace
BIN      := $(CURDIR)/bin
PREFIX   ?= /usr/local
export GOFLAGS ?= -mod=mod
export CGO_ENABLED = 0
# Go's own install location, for a fresh machine whose PATH lacks it.
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all prereqs build install test test-unit test-e2e test-k8s lint fuzz vulncheck bench demo demo-bgp demo-cluster k8s clean

all: build

## prereqs: root, the commands and kernel features the test cluster needs;
## installs missing commands with apt-get as root on Debian/Ubuntu
prereqs:
	@scripts/prereqs.sh

## build: static eipd and kubectl-eip in bin/
build:
	$(GO) build -trimpath -tags $(EIPD_TAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/eipd ./daemon
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kubectl-eip ./kubectl-eip

## install: put kubectl-eip (and eipd) on PATH, so `kubectl eip` works;
## kubectl_complete-eip makes `kubectl eip <TAB>` complete
install: build
	install -m 0755 $(BIN)/kubectl-eip $(PREFIX)/bin/kubectl-eip
	install -m 0755 kubectl-eip/kubectl_complete-eip $(PREFIX)/bin/kubectl_complete-eip
	install -m 0755 $(BIN)/eipd $(PREFIX)/bin/eipd

## release: a release in one folder (OUT, default bin/release): eipd's image
## archive, the install manifest eip.yaml, the Helm chart, the kubectl-eip
## archives and krew manifest, SBOMs and SHA256SUMS (VERSION=v0.1.0)
release:
	VERSION=$(VERSION) OUT=$(OUT) scripts/release.sh

## lint: gofmt and go vet must be clean
lint:
	@out=$$(gofmt -l charts daemon docs kubectl-eip internal manifests scripts testenv); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## k8s: build kube-apiserver, etcd and kubectl from Go modules (cached)
k8s:
	@scripts/build-k8s.sh

## test: every tier: lint, unit and privileged tests, fuzz smoke, e2e on a real cluster
test: prereqs lint build
	scripts/test.sh

test-unit:
	$(GO) test -count=1 ./internal/... ./daemon/... ./kubectl-eip/... ./manifests/... ./charts/... ./scripts/... ./docs/...

test-e2e: prereqs build
	scripts/test.sh e2e

## test-k8s: the core e2e tests (failover, hand-off, live configuration,
## allocation, the plugin) against another Kubernetes release's API server,
## built from its Go modules (K8S_VERSION=v1.36.3; not run by `make test`)
K8S_VERSION ?= v1.36.3
CORE_E2E    := ^Test(ServiceIPsAnswerFromOneNodeEach|KilledHolderFailsOver|PartitionedHolderFailsOverAndStaysSingle|GracefulStopHandsOff|AllDaemonsStoppedThenOneReturns|ConfigEditsApplyLive|SharedIPIsOneLock|AllocationRace|RequestedAddress|DualStackAllocation|Sharing|ReleaseOnDeleteAndTypeChange|ClassOnlyLeavesClasslessServicesToAnother|PluginStatusMatchesLocks|PluginMoveClientFollows|PluginVersion)$$
test-k8s: prereqs build
	bin=$$(K8S_VERSION=$(K8S_VERSION) scripts/build-k8s.sh | tail -n1) && \
		$$bin/kube-apiserver --version && \
		EIP_K8S_BIN=$$bin EIPD_BIN=$(BIN)/eipd KUBECTL_EIP_BIN=$(BIN)/kubectl-eip \
		$(GO) test -count=1 -v -run '$(CORE_E2E)' ./testenv/e2e/

## fuzz: run each fuzz target briefly
fuzz:
	scripts/fuzz.sh 100000x

## vulncheck: govulncheck against the pinned vulnerability database; fails
## on a reachable vulnerability not accepted in scripts/vulncheck.accepted
vulncheck:
	scripts/vulncheck.sh

## bench: measure the targets of docs/design.md on the test cluster
bench: prereqs build
	scripts/bench.sh

## demo: a real local cluster, a Service, its IPs answering, a failover
demo: prereqs build
	scripts/demo.sh

## demo-bgp: route mode: a BIRD router peering with the nodes, a routed client, a failover and a move through the router
demo-bgp: prereqs build
	scripts/demo.sh -bgp

## demo-cluster: eip from manifests/ and make image on real kubelet nodes, HTTP through a rollout
demo-cluster: prereqs
	scripts/demo-cluster.sh

clean:
	rm -rf $(BIN) results

## image: multi-arch OCI image archive bin/eipd-image.tar, no container engine
.PHONY: image
image:
	VERSION=$(VERSION) scripts/image.sh
