// Package cli is kubectl-eip, the kubectl plugin of eip: `kubectl eip
// status` shows which node holds each external IP and how the nodes'
// daemons are doing, and `kubectl eip move` hands an IP to another node.
//
// The commands follow k8s.io/sample-cli-plugin: an options struct per
// command with Complete (fill in from flags, arguments and the kubeconfig),
// Validate (reject bad arguments before any request) and Run; every byte of
// output goes through the IOStreams, so tests read a buffer.
//
// What the plugin can and cannot know: it reads the same Leases, Services,
// ConfigMap and Nodes as the daemons, with one list call each, and computes
// the managed IPs with the daemons' own code (packages config and ipset).
// It does not watch for a lease duration before answering, so "alive" means
// a heartbeat renewed within its lease duration as of the plugin's clock;
// the daemons themselves judge liveness from observed changes (docs/design.md, Liveness),
// and `move` reports it when the holder refuses a target it does not see
// alive.
package cli
