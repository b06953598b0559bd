// Package lease is eip's coordination layer: the names and contents of the
// coordination.k8s.io Leases that eip writes, the judgement of which nodes
// are alive, the rendezvous rank that orders nodes for an IP, the per-IP
// decision (bind, acquire, hand off, release, fence) and the small store that
// writes Leases.
//
// Guarantees, stated first as client-go's leader election does: eip does not
// rely on clocks agreeing between nodes. A node is judged alive or dead only
// from the moments this process observed its heartbeat change, measured on
// this process's monotonic clock, and only while this process can see its own
// heartbeat arrive through the same watch. A lock Lease names the node that
// may bind an IP; it is written only when ownership changes, and a write
// that takes or gives ownership always carries a resourceVersion
// precondition, so of two racing nodes exactly one succeeds.
//
// Everything here except Store is pure: decisions are functions of observed
// state and a time, and are tested without goroutines or sleeps.
package lease
