package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eip-project/eip/internal/bgp"
)

// bgpMetrics are route mode's: the sessions with the peers and what went
// over them.
type bgpMetrics struct {
	up       *prometheus.GaugeVec
	routes   prometheus.Gauge
	updates  *prometheus.CounterVec
	received *prometheus.GaugeVec

	mu sync.Mutex
	// seen is the speaker's UPDATE count per peer at the last observe, so
	// that eip_bgp_updates_sent_total only grows.
	seen map[string]uint64
}

func newBGPMetrics() *bgpMetrics {
	return &bgpMetrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eip_bgp_session_up",
			Help: "1 while the BGP session with the peer is established, else 0 (route mode).",
		}, []string{"peer"}),
		routes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eip_bgp_routes_announced",
			Help: "Host routes this node announces over BGP: the route-mode IPs it holds.",
		}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eip_bgp_updates_sent_total",
			Help: "BGP UPDATE messages sent to the peer.",
		}, []string{"peer"}),
		received: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eip_bgp_routes_received",
			Help: "Routes from the peer that the speaker holds, using none; past the peer's max-prefixes it closes the session.",
		}, []string{"peer"}),
		seen: map[string]uint64{},
	}
}

// observe sets the metrics from the speaker's sessions and the number of
// routes announced; peers no longer configured lose their series.
func (b *bgpMetrics) observe(sessions []bgp.Session, routes int) {
	b.routes.Set(float64(routes))
	b.mu.Lock()
	defer b.mu.Unlock()
	current := make(map[string]bool, len(sessions))
	for _, s := range sessions {
		peer := s.Peer.String()
		current[peer] = true
		up := 0.0
		if s.Up() {
			up = 1
		}
		b.up.WithLabelValues(peer).Set(up)
		b.received.WithLabelValues(peer).Set(float64(s.Received))
		if seen := b.seen[peer]; s.UpdatesSent > seen {
			b.updates.WithLabelValues(peer).Add(float64(s.UpdatesSent - seen))
		}
		b.seen[peer] = s.UpdatesSent
	}
	for peer := range b.seen {
		if !current[peer] {
			delete(b.seen, peer)
			b.up.DeleteLabelValues(peer)
			b.updates.DeleteLabelValues(peer)
			b.received.DeleteLabelValues(peer)
		}
	}
}
