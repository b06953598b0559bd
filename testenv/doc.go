// Package testenv runs a real Kubernetes control plane and a small LAN of
// nodes on one machine, for the end-to-end tests and benchmarks of eip.
//
// Every run creates its own network namespaces: a control-plane namespace
// running etcd and kube-apiserver (built from source by scripts/build-k8s.sh),
// one namespace per node, a client namespace that plays a host on the LAN,
// and a namespace holding the bridge that joins them. Nothing is added to the
// host's own network namespace: the test process reaches the API server by
// opening its sockets inside the control-plane namespace, and watches the LAN
// by opening its sockets inside the client namespace.
//
// Addresses come from the benchmarking ranges 198.18.0.0/16 and
// 2001:db8::/64; [Cluster.ServiceIP] hands out addresses on that LAN that no
// namespace owns, for Services to use.
//
// The package needs root (network namespaces, raw sockets) and the binaries
// from scripts/build-k8s.sh; [Prerequisites] says what is missing, and
// [StartT] skips a test with that reason.
package testenv
