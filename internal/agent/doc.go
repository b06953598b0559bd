// Package agent is eipd's reconciler: one node's view of the cluster in,
// addresses bound and Leases written out.
//
// One goroutine (Agent.Run's loop) owns all state. Informers, netlink
// events, wire claims, timers, the heartbeat writer and the lock writers
// only send to it. On every wake-up it observes heartbeats, recomputes the
// managed IPs when Services, Nodes or the configuration changed, asks
// lease.Decide what to do with each IP and applies the answers
// idempotently: binds and unbinds at once (netlink is fast and local),
// Lease writes through a small pool of writers whose results come back as
// events. Nothing here decides policy; the decisions live in package lease
// and package policy, where they are pure and tested on their own.
package agent
