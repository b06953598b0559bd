package metrics_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"gotest.tools/v3/assert"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/metrics"
)

// eipMetrics are the names docs/metrics.md documents.
var eipMetrics = []string{
	"eip_ips_held", "eip_ips_managed", "eip_binds_total", "eip_unbinds_total", "eip_acquisitions_total",
	"eip_handoffs_total", "eip_lease_conflicts_total", "eip_fencings_total",
	"eip_failover_duration_seconds", "eip_announcements_sent_total", "eip_api_errors_total",
	"eip_config_errors_total", "eip_config_valid", "eip_ready", "eip_heartbeat_renew_duration_seconds", "eip_build_info",
	"eip_held_addresses_vanished_total", "eip_lifetime_refreshes_late_total",
	"eip_address_conflicts_total", "eip_foreign_claims_total", "eip_events_summarised_total",
	"eip_lease_writes_total", "eip_range_addresses",
}

func newMetrics(t *testing.T, clk *clocktesting.FakeClock, sent *uint64) *metrics.Metrics {
	t.Helper()
	m, err := metrics.New(metrics.Options{Clock: clk, Announced: func() uint64 { return *sent }, Version: "v1.2.3"})
	assert.NilError(t, err)
	return m
}

func TestNewRequiresClockAndCounter(t *testing.T) {
	_, err := metrics.New(metrics.Options{Announced: func() uint64 { return 0 }})
	assert.ErrorContains(t, err, "clock is required")
	_, err = metrics.New(metrics.Options{Clock: clocktesting.NewFakeClock(time.Now())})
	assert.ErrorContains(t, err, "announced counter is required")
}

func TestMetricsCount(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	var sent uint64
	m := newMetrics(t, clk, &sent)

	m.ConfigValid(true)
	m.Held(3)
	m.Held(2)
	m.Managed(4)
	for range 3 {
		m.Bound()
	}
	m.Unbound()
	m.Acquired(false)
	m.Acquired(false)
	m.Acquired(true)
	m.Handoff()
	m.Conflict()
	m.Conflict()
	m.Fenced()
	m.Failover(1200 * time.Millisecond)
	m.Failover(40 * time.Second)
	m.APIError("renew")
	m.APIError("acquire")
	m.APIError("acquire")
	m.ConfigError()
	m.Renewed(3 * time.Millisecond)
	m.Vanished()
	m.RefreshLate()
	m.RefreshLate()
	m.AddressConflict()
	m.ForeignClaim()
	m.ForeignClaim()
	m.EventSummarised("Bound")
	m.EventSummarised("Bound")
	m.EventSummarised("TakenOver")
	sent = 7

	const want = `
# HELP eip_acquisitions_total IP locks taken by this node: kind=new for a free or new lock, kind=takeover for one taken from a dead holder.
# TYPE eip_acquisitions_total counter
eip_acquisitions_total{kind="new"} 2
eip_acquisitions_total{kind="takeover"} 1
# HELP eip_address_conflicts_total Probes before a bind, or before a load-balancer address is assigned, answered by a machine that is not an eip node: the address is in use on the LAN and was not bound or assigned.
# TYPE eip_address_conflicts_total counter
eip_address_conflicts_total 1
# HELP eip_announcements_sent_total Gratuitous ARP and unsolicited neighbour advertisement packets sent.
# TYPE eip_announcements_sent_total counter
eip_announcements_sent_total 7
# HELP eip_api_errors_total Failed API server requests by operation (renew, create, acquire, handoff, release, delete), conflicts excluded.
# TYPE eip_api_errors_total counter
eip_api_errors_total{op="acquire"} 2
eip_api_errors_total{op="renew"} 1
# HELP eip_binds_total Addresses bound on this node's interfaces.
# TYPE eip_binds_total counter
eip_binds_total 3
# HELP eip_build_info Always 1; the version label is eipd's version.
# TYPE eip_build_info gauge
eip_build_info{version="v1.2.3"} 1
# HELP eip_config_errors_total Invalid eip-config edits rejected (the last good configuration stays in force).
# TYPE eip_config_errors_total counter
eip_config_errors_total 1
# HELP eip_config_valid 1 when eip-config, as it is now, is the configuration in force; 0 while it is invalid (the last good configuration, or none, serves meanwhile).
# TYPE eip_config_valid gauge
eip_config_valid 1
# HELP eip_ready 1 while this eipd would answer /readyz with 200 (it would take over the IPs it should, and its heartbeat renews), else 0.
# TYPE eip_ready gauge
eip_ready 1
# HELP eip_events_summarised_total Events on Services that this node's Event budget left out, by reason; each is counted in an EventsSummarised Event on the Node.
# TYPE eip_events_summarised_total counter
eip_events_summarised_total{reason="Bound"} 2
eip_events_summarised_total{reason="TakenOver"} 1
# HELP eip_failover_duration_seconds Time from this node judging an IP's holder dead to taking the IP over.
# TYPE eip_failover_duration_seconds histogram
eip_failover_duration_seconds_bucket{le="0.1"} 0
eip_failover_duration_seconds_bucket{le="0.25"} 0
eip_failover_duration_seconds_bucket{le="0.5"} 0
eip_failover_duration_seconds_bucket{le="0.75"} 0
eip_failover_duration_seconds_bucket{le="1"} 0
eip_failover_duration_seconds_bucket{le="1.5"} 1
eip_failover_duration_seconds_bucket{le="2"} 1
eip_failover_duration_seconds_bucket{le="2.5"} 1
eip_failover_duration_seconds_bucket{le="3"} 1
eip_failover_duration_seconds_bucket{le="5"} 1
eip_failover_duration_seconds_bucket{le="7.5"} 1
eip_failover_duration_seconds_bucket{le="10"} 1
eip_failover_duration_seconds_bucket{le="15"} 1
eip_failover_duration_seconds_bucket{le="20"} 1
eip_failover_duration_seconds_bucket{le="30"} 1
eip_failover_duration_seconds_bucket{le="+Inf"} 2
eip_failover_duration_seconds_sum 41.2
eip_failover_duration_seconds_count 2
# HELP eip_fencings_total Times this node unbound everything because it could not renew its heartbeat (api-loss=fence).
# TYPE eip_fencings_total counter
eip_fencings_total 1
# HELP eip_foreign_claims_total Announcements or replies from a machine that is not an eip node for an address this node holds.
# TYPE eip_foreign_claims_total counter
eip_foreign_claims_total 2
# HELP eip_handoffs_total IP locks handed by this node to another node (move, rebalance, shutdown).
# TYPE eip_handoffs_total counter
eip_handoffs_total 1
# HELP eip_heartbeat_renew_duration_seconds Round trip of successful heartbeat Lease renewals.
# TYPE eip_heartbeat_renew_duration_seconds histogram
eip_heartbeat_renew_duration_seconds_bucket{le="0.001"} 0
eip_heartbeat_renew_duration_seconds_bucket{le="0.0025"} 0
eip_heartbeat_renew_duration_seconds_bucket{le="0.005"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="0.01"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="0.025"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="0.05"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="0.1"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="0.25"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="0.5"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="1"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="2.5"} 1
eip_heartbeat_renew_duration_seconds_bucket{le="+Inf"} 1
eip_heartbeat_renew_duration_seconds_sum 0.003
eip_heartbeat_renew_duration_seconds_count 1
# HELP eip_held_addresses_vanished_total Addresses this node held that were removed from their interface by anyone but eipd, expired lifetimes included (should stay 0).
# TYPE eip_held_addresses_vanished_total counter
eip_held_addresses_vanished_total 1
# HELP eip_ips_held External IPs bound on this node.
# TYPE eip_ips_held gauge
eip_ips_held 2
# HELP eip_ips_managed External IPs that some node should bind (named by a Service, inside a range, usable), as this node sees them.
# TYPE eip_ips_managed gauge
eip_ips_managed 4
# HELP eip_lease_conflicts_total Lock writes lost to another node's write (the loser re-reads; normal in small numbers).
# TYPE eip_lease_conflicts_total counter
eip_lease_conflicts_total 2
# HELP eip_lease_writes_total Lease writes this node sent to the API server, whatever their outcome, by role (lock, heartbeat) and op (create, update, delete).
# TYPE eip_lease_writes_total counter
eip_lease_writes_total{op="create",role="heartbeat"} 0
eip_lease_writes_total{op="create",role="lock"} 0
eip_lease_writes_total{op="delete",role="heartbeat"} 0
eip_lease_writes_total{op="delete",role="lock"} 0
eip_lease_writes_total{op="update",role="heartbeat"} 0
eip_lease_writes_total{op="update",role="lock"} 0
# HELP eip_lifetime_refreshes_late_total Refreshes of address lifetimes that came more than 1.5 refresh intervals after the previous one.
# TYPE eip_lifetime_refreshes_late_total counter
eip_lifetime_refreshes_late_total 2
# HELP eip_unbinds_total Addresses removed from this node's interfaces.
# TYPE eip_unbinds_total counter
eip_unbinds_total 1
`
	assert.NilError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), eipMetrics...))
}

// A fresh Metrics already exposes every eip_ series an alert may use, with
// zero values, except the per-operation error counter.
func TestMetricsExistFromTheStart(t *testing.T) {
	var sent uint64
	m := newMetrics(t, clocktesting.NewFakeClock(time.Now()), &sent)
	n, err := testutil.GatherAndCount(m.Registry(), eipMetrics...)
	assert.NilError(t, err)
	// One series per name, but two for acquisitions (new, takeover), six
	// for lease writes (two roles, three operations), and none yet for
	// eip_api_errors_total, eip_events_summarised_total and
	// eip_range_addresses.
	assert.Equal(t, n, len(eipMetrics)-3+1+5)
}

// The names and help texts follow Prometheus conventions (promlint), and
// the Go runtime and process collectors are registered.
func TestMetricsLintAndCollectors(t *testing.T) {
	var sent uint64
	m := newMetrics(t, clocktesting.NewFakeClock(time.Now()), &sent)
	m.APIError("renew")
	m.EventSummarised("Bound")
	cfg, err := config.Parse(map[string]string{"ranges": "198.18.100.0/24"})
	assert.NilError(t, err)
	m.Ranges(ipset.RangeUsage(cfg, slices.Values([]ipset.Entry(nil)), nil, nil))
	problems, err := testutil.GatherAndLint(m.Registry())
	assert.NilError(t, err)
	assert.Equal(t, len(problems), 0, "%v", problems)

	families, err := m.Registry().Gather()
	assert.NilError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range append([]string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes"}, eipMetrics...) {
		assert.Assert(t, names[want], "metric %s is not exposed", want)
	}
}

// eip_range_addresses follows the ranges configured: a range removed loses
// its series, one renamed gets new ones.
func TestRangeAddresses(t *testing.T) {
	var sent uint64
	m := newMetrics(t, clocktesting.NewFakeClock(time.Now()), &sent)
	cfg, err := config.Parse(map[string]string{"ranges": "198.18.100.0/24 name=lan\n198.18.101.0-198.18.101.9"})
	assert.NilError(t, err)
	m.Ranges([]ipset.Usage{
		{Range: &cfg.Ranges[0], Capacity: 256, Reserved: 2, Allocated: 230, Bound: 100, Free: 24},
		{Range: &cfg.Ranges[1], Capacity: 10, Allocated: 1, Free: 9},
	})
	const both = `
# HELP eip_range_addresses Addresses of each range (its name, else its CIDR or span) by state: allocated (named by a Service and served), free, reserved (never bound: network, broadcast, a node's or the API server's address), as this node sees the cluster; bound: those bound on this node.
# TYPE eip_range_addresses gauge
eip_range_addresses{range="198.18.101.0-198.18.101.9",state="allocated"} 1
eip_range_addresses{range="198.18.101.0-198.18.101.9",state="bound"} 0
eip_range_addresses{range="198.18.101.0-198.18.101.9",state="free"} 9
eip_range_addresses{range="198.18.101.0-198.18.101.9",state="reserved"} 0
eip_range_addresses{range="lan",state="allocated"} 230
eip_range_addresses{range="lan",state="bound"} 100
eip_range_addresses{range="lan",state="free"} 24
eip_range_addresses{range="lan",state="reserved"} 2
`
	assert.NilError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(both), "eip_range_addresses"))
	m.Ranges([]ipset.Usage{{Range: &cfg.Ranges[0], Capacity: 256, Reserved: 2, Allocated: 231, Bound: 101, Free: 23}})
	const one = `
# HELP eip_range_addresses Addresses of each range (its name, else its CIDR or span) by state: allocated (named by a Service and served), free, reserved (never bound: network, broadcast, a node's or the API server's address), as this node sees the cluster; bound: those bound on this node.
# TYPE eip_range_addresses gauge
eip_range_addresses{range="lan",state="allocated"} 231
eip_range_addresses{range="lan",state="bound"} 101
eip_range_addresses{range="lan",state="free"} 23
eip_range_addresses{range="lan",state="reserved"} 2
`
	assert.NilError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(one), "eip_range_addresses"))
}

func TestLeaseWrites(t *testing.T) {
	var sent uint64
	m := newMetrics(t, clocktesting.NewFakeClock(time.Now()), &sent)
	m.LeaseWrite(lease.RoleLock, lease.OpCreate)
	m.LeaseWrite(lease.RoleLock, lease.OpUpdate)
	m.LeaseWrite(lease.RoleLock, lease.OpUpdate)
	m.LeaseWrite(lease.RoleHeartbeat, lease.OpUpdate)
	const want = `
# HELP eip_lease_writes_total Lease writes this node sent to the API server, whatever their outcome, by role (lock, heartbeat) and op (create, update, delete).
# TYPE eip_lease_writes_total counter
eip_lease_writes_total{op="create",role="heartbeat"} 0
eip_lease_writes_total{op="create",role="lock"} 1
eip_lease_writes_total{op="delete",role="heartbeat"} 0
eip_lease_writes_total{op="delete",role="lock"} 0
eip_lease_writes_total{op="update",role="heartbeat"} 1
eip_lease_writes_total{op="update",role="lock"} 2
`
	assert.NilError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "eip_lease_writes_total"))
}
