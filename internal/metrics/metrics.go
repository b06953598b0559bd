package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/wire"
)

// Options configures New.
type Options struct {
	// Clock stamps heartbeat renewals for Ready.
	Clock clock.PassiveClock
	// Announced returns how many gratuitous ARP and unsolicited NA packets
	// have been sent (netif.Announcer.Sent).
	Announced func() uint64
	// Version is eipd's version, exported as eip_build_info.
	Version string
	// LANDrops counts the liveness datagrams dropped (nil: none counted).
	LANDrops *lanlive.Drops
}

// Metrics counts what one eipd does. It implements agent.Metrics; its
// methods may be called from any goroutine.
type Metrics struct {
	reg *prometheus.Registry

	held         prometheus.Gauge
	managed      prometheus.Gauge
	binds        prometheus.Counter
	unbinds      prometheus.Counter
	acquisitions *prometheus.CounterVec
	handoffs     prometheus.Counter
	conflicts    prometheus.Counter
	fencings     prometheus.Counter
	failover     prometheus.Histogram
	apiErrors    *prometheus.CounterVec
	configErrors prometheus.Counter
	configValid  prometheus.Gauge
	renew        prometheus.Histogram
	vanished     prometheus.Counter
	refreshLate  prometheus.Counter
	summarised   *prometheus.CounterVec
	leaseWrites  *prometheus.CounterVec

	wire   *wireMetrics
	bgp    *bgpMetrics
	ranges *rangeMetrics
	ready  *readiness
}

// Label values of eip_acquisitions_total's kind.
const (
	kindNew      = "new"
	kindTakeover = "takeover"
)

// New returns Metrics registered in their own registry, together with the
// Go runtime and process collectors.
func New(opt Options) (*Metrics, error) {
	if opt.Clock == nil {
		return nil, errors.New("metrics: clock is required")
	}
	if opt.Announced == nil {
		return nil, errors.New("metrics: announced counter is required")
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eip_ips_held",
			Help: "External IPs bound on this node.",
		}),
		managed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eip_ips_managed",
			Help: "External IPs that some node should bind (named by a Service, inside a range, usable), as this node sees them.",
		}),
		binds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_binds_total",
			Help: "Addresses bound on this node's interfaces.",
		}),
		unbinds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_unbinds_total",
			Help: "Addresses removed from this node's interfaces.",
		}),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eip_acquisitions_total",
			Help: "IP locks taken by this node: kind=new for a free or new lock, kind=takeover for one taken from a dead holder.",
		}, []string{"kind"}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_handoffs_total",
			Help: "IP locks handed by this node to another node (move, rebalance, shutdown).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_lease_conflicts_total",
			Help: "Lock writes lost to another node's write (the loser re-reads; normal in small numbers).",
		}),
		fencings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_fencings_total",
			Help: "Times this node unbound everything because it could not renew its heartbeat (api-loss=fence).",
		}),
		failover: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "eip_failover_duration_seconds",
			Help:    "Time from this node judging an IP's holder dead to taking the IP over.",
			Buckets: []float64{0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 5, 7.5, 10, 15, 20, 30},
		}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eip_api_errors_total",
			Help: "Failed API server requests by operation (renew, create, acquire, handoff, release, delete), conflicts excluded.",
		}, []string{"op"}),
		configValid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eip_config_valid",
			Help: "1 when eip-config, as it is now, is the configuration in force; 0 while it is invalid (the last good configuration, or none, serves meanwhile).",
		}),
		configErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_config_errors_total",
			Help: "Invalid eip-config edits rejected (the last good configuration stays in force).",
		}),
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "eip_heartbeat_renew_duration_seconds",
			Help:    "Round trip of successful heartbeat Lease renewals.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}),
		vanished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_held_addresses_vanished_total",
			Help: "Addresses this node held that were removed from their interface by anyone but eipd, expired lifetimes included (should stay 0).",
		}),
		refreshLate: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_lifetime_refreshes_late_total",
			Help: "Refreshes of address lifetimes that came more than 1.5 refresh intervals after the previous one.",
		}),
		summarised: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eip_events_summarised_total",
			Help: "Events on Services that this node's Event budget left out, by reason; each is counted in an EventsSummarised Event on the Node.",
		}, []string{"reason"}),
		leaseWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eip_lease_writes_total",
			Help: "Lease writes this node sent to the API server, whatever their outcome, by role (lock, heartbeat) and op (create, update, delete).",
		}, []string{"role", "op"}),
		wire:   newWireMetrics(),
		bgp:    newBGPMetrics(),
		ranges: newRangeMetrics(),
		ready:  &readiness{clk: opt.Clock},
	}
	announced := opt.Announced
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "eip_build_info",
		Help: "Always 1; the version label is eipd's version.",
	}, []string{"version"})
	build.WithLabelValues(opt.Version).Set(1)
	// Both kinds exist from the start, so rate() and alerts see a zero
	// rather than no series.
	m.acquisitions.WithLabelValues(kindNew)
	m.acquisitions.WithLabelValues(kindTakeover)
	for _, role := range []string{lease.RoleLock, lease.RoleHeartbeat} {
		for _, op := range []string{lease.OpCreate, lease.OpUpdate, lease.OpDelete} {
			m.leaseWrites.WithLabelValues(role, op)
		}
	}
	m.wire.setVerdicts(nil)

	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "eip_ready",
		Help: "1 while this eipd would answer /readyz with 200 (it would take over the IPs it should, and its heartbeat renews), else 0.",
	}, func() float64 {
		if m.Ready() != nil {
			return 0
		}
		return 1
	})
	collectors := []prometheus.Collector{ready,
		m.held, m.managed, m.binds, m.unbinds, m.acquisitions, m.handoffs, m.conflicts, m.fencings,
		m.failover, m.apiErrors, m.configErrors, m.configValid, m.renew, m.vanished, m.refreshLate, m.summarised, build,
		m.leaseWrites, m.ranges.addrs,
		m.wire.conflicted, m.wire.foreign, m.wire.checks, m.wire.verdicts,
		m.bgp.up, m.bgp.routes, m.bgp.updates, m.bgp.received,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "eip_announcements_sent_total",
			Help: "Gratuitous ARP and unsolicited neighbour advertisement packets sent.",
		}, func() float64 { return float64(announced()) }),
		lanDropped(opt.LANDrops, "bad-signature", func(d *lanlive.Drops) uint64 { return d.BadSignature.Load() }),
		lanDropped(opt.LANDrops, "replayed", func(d *lanlive.Drops) uint64 { return d.Stale.Load() }),
		lanDropped(opt.LANDrops, "misaddressed", func(d *lanlive.Drops) uint64 { return d.Misaddressed.Load() }),
		lanDropped(opt.LANDrops, "unproven", func(d *lanlive.Drops) uint64 { return d.Unproven.Load() }),
		lanDropped(opt.LANDrops, "implausible", func(d *lanlive.Drops) uint64 { return d.Implausible.Load() }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	for _, c := range collectors {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// lanDropped is eip_liveness_datagrams_dropped_total for one reason.
func lanDropped(d *lanlive.Drops, reason string, count func(*lanlive.Drops) uint64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "eip_liveness_datagrams_dropped_total",
		Help:        "Liveness datagrams dropped, by reason: bad-signature (no key of the Secret's signed it), replayed (not newer than what its sender sent before), misaddressed (sent to another node).",
		ConstLabels: prometheus.Labels{"reason": reason},
	}, func() float64 {
		if d == nil {
			return 0
		}
		return float64(count(d))
	})
}

// Registry returns the registry holding every metric, for serving or tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// BGP sets the route-mode metrics from the speaker's sessions and the
// number of routes announced. Peers no longer configured lose their series.
func (m *Metrics) BGP(sessions []bgp.Session, routes int) { m.bgp.observe(sessions, routes) }

// LeaseWrite counts a Lease write sent (a lease.Written).
func (m *Metrics) LeaseWrite(role, op string) { m.leaseWrites.WithLabelValues(role, op).Inc() }

// Ranges sets eip_range_addresses from the usage of every configured
// range, bound counting this node's addresses. Ranges no longer configured
// lose their series.
func (m *Metrics) Ranges(usage []ipset.Usage) { m.ranges.observe(usage) }

// Held sets eip_ips_held.
func (m *Metrics) Held(n int) { m.held.Set(float64(n)) }

// Managed sets eip_ips_managed.
func (m *Metrics) Managed(n int) { m.managed.Set(float64(n)) }

// Bound counts a bind.
func (m *Metrics) Bound() { m.binds.Inc() }

// Unbound counts an unbind.
func (m *Metrics) Unbound() { m.unbinds.Inc() }

// Acquired counts a lock taken; takeover is true when taken from a dead holder.
func (m *Metrics) Acquired(takeover bool) {
	kind := kindNew
	if takeover {
		kind = kindTakeover
	}
	m.acquisitions.WithLabelValues(kind).Inc()
}

// Handoff counts a lock handed to another node.
func (m *Metrics) Handoff() { m.handoffs.Inc() }

// Conflict counts a lock write lost to another node.
func (m *Metrics) Conflict() { m.conflicts.Inc() }

// Fenced counts a fencing.
func (m *Metrics) Fenced() { m.fencings.Inc() }

// Failover observes the time from judging a holder dead to taking its IP.
func (m *Metrics) Failover(d time.Duration) { m.failover.Observe(d.Seconds()) }

// APIError counts a failed API request; a failed heartbeat renewal (op
// "renew") also makes Ready fail until the next successful one.
func (m *Metrics) APIError(op string) {
	m.apiErrors.WithLabelValues(op).Inc()
	if op == renewOp {
		m.ready.failed()
	}
}

// EventSummarised counts an Event on a Service left out by the node's
// Event budget.
func (m *Metrics) EventSummarised(reason string) { m.summarised.WithLabelValues(reason).Inc() }

// ConfigError counts a rejected configuration.
func (m *Metrics) ConfigError() { m.configErrors.Inc() }

// Renewed observes a successful heartbeat renewal's round trip and stamps
// it for Ready.
func (m *Metrics) Renewed(d time.Duration) {
	m.renew.Observe(d.Seconds())
	m.ready.renewed()
}

// Vanished counts a held address removed by someone other than eipd.
func (m *Metrics) Vanished() { m.vanished.Inc() }

// RefreshLate counts a late refresh of address lifetimes.
func (m *Metrics) RefreshLate() { m.refreshLate.Inc() }

// AddressConflict counts a probe answered by a stranger.
func (m *Metrics) AddressConflict() { m.wire.conflicted.Inc() }

// ForeignClaim counts a stranger claiming an address this node holds.
func (m *Metrics) ForeignClaim() { m.wire.foreign.Inc() }

// WireCheck counts a probe checking an IP on the wire.
func (m *Metrics) WireCheck() { m.wire.checks.Inc() }

// WireVerdicts sets how many IPs this node checks, by verdict; every
// verdict has a series, zero when no IP has it.
func (m *Metrics) WireVerdicts(counts map[wire.Verdict]int) { m.wire.setVerdicts(counts) }

// ConfigValid sets eip_config_valid.
func (m *Metrics) ConfigValid(ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.configValid.Set(v)
}

// NotServing records why this node would not take over an IP it should,
// "" when it would.
func (m *Metrics) NotServing(why string) { m.ready.notServing(why) }

// Ready returns nil when this node would serve and its heartbeat is
// renewing, or why not.
func (m *Metrics) Ready() error { return m.ready.check() }
