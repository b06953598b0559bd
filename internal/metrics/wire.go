package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eip-project/eip/internal/wire"
)

// wireMetrics are what this node sees of its addresses on the LAN: other
// machines answering for them, and the checks of its peers' addresses.
type wireMetrics struct {
	conflicted prometheus.Counter
	foreign    prometheus.Counter
	checks     prometheus.Counter
	verdicts   *prometheus.GaugeVec
}

func newWireMetrics() *wireMetrics {
	return &wireMetrics{
		conflicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_address_conflicts_total",
			Help: "Probes before a bind, or before a load-balancer address is assigned, answered by a machine that is not an eip node: the address is in use on the LAN and was not bound or assigned.",
		}),
		foreign: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_foreign_claims_total",
			Help: "Announcements or replies from a machine that is not an eip node for an address this node holds.",
		}),
		checks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eip_wire_checks_total",
			Help: "Probes this node sent to check, as an IP's successor, that its holder answers for it on the LAN.",
		}),
		verdicts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eip_wire_verdicts",
			Help: "IPs this node checks on the LAN, by the last verdict: holder (answered by its holder alone), none, stranger, two-macs, unchecked.",
		}, []string{"verdict"}),
	}
}

// setVerdicts sets how many IPs this node checks, by verdict; every
// verdict has a series, zero when no IP has it.
func (w *wireMetrics) setVerdicts(counts map[wire.Verdict]int) {
	for v := wire.Unchecked; v <= wire.TwoMACs; v++ {
		w.verdicts.WithLabelValues(v.String()).Set(float64(counts[v]))
	}
}
