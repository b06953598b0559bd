// Package listwatch holds the list and watch calls for what eip reads from
// the API server: Services and Nodes cluster-wide, and in eip's namespace
// the Leases eip manages and its one ConfigMap. eipd's informers and
// `kubectl eip status --watch` read through the same calls, so they select
// the same objects.
package listwatch
