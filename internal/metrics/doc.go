// Package metrics is eipd's observability endpoint: Prometheus metrics,
// liveness and readiness checks, and optional pprof, served on
// --metrics-addr.
//
// Metrics implements agent.Metrics with a private registry, so nothing
// registers into client_golang's global one and tests can build as many as
// they like. Every metric is named eip_* with its unit in the name;
// docs/metrics.md lists them with the questions they answer.
//
// /healthz answers 200 while the process serves HTTP at all: a liveness
// probe must not fail because the API server is down, or kubelet would
// restart every eipd during an API outage and take the IPs they hold with
// them. /readyz answers 200 only once the agent has synced its caches and
// while its heartbeat is renewing (see Metrics.Ready), so a rolling update
// waits for each new eipd to be part of the cluster before moving on.
package metrics
