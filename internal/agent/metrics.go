package agent

import (
	"time"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/wire"
)

// Metrics receives what the agent counts. The daemon passes a Prometheus
// implementation; tests may pass nil.
type Metrics interface {
	// Held is the number of IPs this node has bound.
	Held(n int)
	// Managed is the number of IPs some node should bind: with Held summed
	// over the nodes, it shows IPs bound nowhere.
	Managed(n int)
	// Ranges is how the addresses of each range are used, Bound counting
	// the ones bound on this node; after every full pass.
	Ranges([]ipset.Usage)
	Bound()
	Unbound()
	// Acquired counts a lock taken by this node; takeover is true when it
	// was taken from a dead holder.
	Acquired(takeover bool)
	Handoff()
	// Conflict counts a lock write lost to another node.
	Conflict()
	Fenced()
	// Failover observes the time from judging a holder dead to binding its IP.
	Failover(d time.Duration)
	APIError(op string)
	ConfigError()
	// Renewed observes a heartbeat renewal's round trip.
	Renewed(d time.Duration)
	// Vanished counts a held address removed from its interface by
	// someone other than eipd, the kernel's lifetime expiry included.
	Vanished()
	// RefreshLate counts a refresh of address lifetimes that came later
	// than one and a half refresh intervals after the one before.
	RefreshLate()
	// AddressConflict counts a probe answered by a machine that is not an
	// eip node: the address was not bound.
	AddressConflict()
	// ForeignClaim counts a claim by another machine for an address this
	// node holds while its renewals succeed.
	ForeignClaim()
	// WireCheck counts a probe sent to check an IP on the wire;
	// WireVerdicts is how many IPs this node checks, by verdict, whenever
	// a verdict changed.
	WireCheck()
	WireVerdicts(map[wire.Verdict]int)
	// EventSummarised counts an Event on a Service that the node's budget
	// left out (events.go), by reason.
	EventSummarised(reason string)
	// BGP reports the route-mode sessions and the routes announced, every
	// renew interval.
	BGP(sessions []bgp.Session, routes int)
	// ConfigValid says whether the ConfigMap, as it is now, is the
	// configuration in force; false while it is invalid, whatever serves
	// meanwhile (the last good configuration, or none).
	ConfigValid(bool)
	// NotServing says why this node would not take over an IP it should
	// (no valid configuration in force, peers that do not hear it, an
	// interface of the configuration missing); "" when it would. /readyz
	// fails while it is set.
	NotServing(why string)
}

type nopMetrics struct{}

func (nopMetrics) Held(int)                          {}
func (nopMetrics) Managed(int)                       {}
func (nopMetrics) Ranges([]ipset.Usage)              {}
func (nopMetrics) Bound()                            {}
func (nopMetrics) Unbound()                          {}
func (nopMetrics) Acquired(bool)                     {}
func (nopMetrics) Handoff()                          {}
func (nopMetrics) Conflict()                         {}
func (nopMetrics) Fenced()                           {}
func (nopMetrics) Failover(time.Duration)            {}
func (nopMetrics) APIError(string)                   {}
func (nopMetrics) ConfigError()                      {}
func (nopMetrics) Renewed(time.Duration)             {}
func (nopMetrics) Vanished()                         {}
func (nopMetrics) RefreshLate()                      {}
func (nopMetrics) AddressConflict()                  {}
func (nopMetrics) ForeignClaim()                     {}
func (nopMetrics) EventSummarised(string)            {}
func (nopMetrics) WireCheck()                        {}
func (nopMetrics) WireVerdicts(map[wire.Verdict]int) {}
func (nopMetrics) BGP([]bgp.Session, int)            {}
func (nopMetrics) ConfigValid(bool)                  {}
func (nopMetrics) NotServing(string)                 {}
