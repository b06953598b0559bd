package agent

import (
	"log/slog"
	"maps"
	"time"

	corelisters "k8s.io/client-go/listers/core/v1"

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
	nodes corelisters.NodeLister
}

func newGoneNodes(log *slog.Logger, nodes corelisters.NodeLister) goneNodes {
	return goneNodes{since: map[string]time.Time{}, log: log, nodes: nodes}
}

// observe judges each of nodes again at now by its Node object as the
// cache has it (none: policy.NodeGone's nil), and forgets the nodes not
// among them.
func (g *goneNodes) observe(nodes []string, now time.Time) {
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n] = true
		obj, err := g.nodes.Get(n)
		if err != nil {
			obj = nil
		}
		gone, why := policy.NodeGone(obj)
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
