// Package bench measures eip against the targets of docs/design.md on a real
// testenv cluster: crash failover (eipd SIGKILLed, link cut) at the default
// and a tuned lease, the gap of a planned move and of a graceful shutdown,
// bind latency, a cold start of a thousand IPs, steady-state Lease requests
// per second as the API server itself counts them, and the daemon's memory
// and CPU.
//
// Everything is measured the way a user feels it: a client namespace pings
// the external IP every 10 ms and records which MAC answered each request;
// bindings are counted on the node interfaces; API load is read from the
// API server's apiserver_request_total counters, never from eipd's own
// counting. [Run] returns a [Report]: a table of figures (median, p99,
// target, whether it is met), the raw samples, and an SVG plot.
//
// These are benchmarks, not tests: nothing here asserts on timings.
package bench
