package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eip-project/eip/internal/ipset"
)

// rangeMetrics are eip_range_addresses, by range and state.
type rangeMetrics struct {
	addrs *prometheus.GaugeVec

	mu sync.Mutex
	// labels are the ranges given series, so that a range no longer
	// configured loses them.
	labels map[string]bool
}

func newRangeMetrics() *rangeMetrics {
	return &rangeMetrics{
		addrs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eip_range_addresses",
			Help: "Addresses of each range (its name, else its CIDR or span) by state: allocated (named by a Service and served), free, reserved (never bound: network, broadcast, a node's or the API server's address), as this node sees the cluster; bound: those bound on this node.",
		}, []string{"range", "state"}),
		labels: map[string]bool{},
	}
}

// observe sets the series of every configured range from its usage and
// deletes those of ranges no longer configured.
func (r *rangeMetrics) observe(usage []ipset.Usage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	current := make(map[string]bool, len(usage))
	for _, u := range usage {
		label := u.Range.Label()
		current[label] = true
		for state, n := range map[string]uint64{"allocated": u.Allocated, "bound": u.Bound, "free": u.Free, "reserved": u.Reserved} {
			r.addrs.WithLabelValues(label, state).Set(float64(n))
		}
	}
	for label := range r.labels {
		if !current[label] {
			r.addrs.DeletePartialMatch(prometheus.Labels{"range": label})
		}
	}
	r.labels = current
}
