// Package workload installs eip on a real-node cluster (testenv's
// Options.RealNodes) the way users do, runs the test environment's web
// application behind eip's IPs, and measures what the client namespace sees
// of them: 10 ms pings and 50 HTTP requests a second per IP, each through
// ARP, the holder node, kube-proxy and a pod. The realnodes e2e suite, the
// real-node benchmark and the demo share it.
package workload
