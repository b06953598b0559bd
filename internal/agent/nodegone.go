package agent

import (
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/policy"
)

// goneNodes are the nodes out of service (policy.NodeGone: the Node
// deleted, being deleted, or tainted node.kubernetes.io/out-of-service)
// among those with a heartbeat, each with when this node first saw it so:
// lease.View.Gone. Their IPs are taken over at once, not a lease duration
// after their heartbeat stops. It holds no pointer to the loop's state.
type goneNodes struct {
	since map[string]time.Time
	log   *slog.Logger
}

func newGoneNodes(log *slog.Logger) goneNodes {
	return goneNodes{since: map[string]time.Time{}, log: log}
}

// observe judges each of nodes again at now, node giving its Node object
// (nil when there is none), and forgets the nodes not among them.
func (g *goneNodes) observe(nodes []string, node func(string) *corev1.Node, now time.Time) {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n] = true
		gone, why := policy.NodeGone(node(n))
		if !gone {
			if _, was := g.since[n]; was {
				g.log.Info("node is in service again", "node", n)
			}
			delete(g.since, n)
			continue
		}
		if _, was := g.since[n]; !was {
			g.since[n] = now
			g.log.Warn("node is out of service; its IPs are taken over at once", "node", n, "reason", why)
		}
	}
	maps.DeleteFunc(g.since, func(n string, _ time.Time) bool { return !known[n] })
}

// gone is lease.View.Gone.
func (g *goneNodes) gone(node string) (time.Time, bool) {
	t, ok := g.since[node]
	return t, ok
}
