package agent

import (
	"log/slog"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/eip-project/eip/internal/lease"
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

// collectable are the heartbeats among hbs to delete, with no write in
// flight (inflight): those of nodes dead as v judges them, whose Node
// object is gone. The first live eligible node deletes them; for any
// other, none are.
func (g *goneNodes) collectable(v lease.View, hbs []*coordinationv1.Lease, inflight map[string]bool) []*coordinationv1.Lease {
	if len(v.Live) == 0 || v.Live[0] != v.Self {
		return nil
	}
	var out []*coordinationv1.Lease
	for _, l := range hbs {
		node, ok := lease.NodeOf(l.Name)
		if !ok || v.Alive(node) || inflight[l.Name] {
			continue
		}
		if _, err := g.nodes.Get(node); !apierrors.IsNotFound(err) {
			continue
		}
		g.log.Info("deleting the heartbeat of a dead node that no longer exists", "node", node, "lease", l.Name)
		out = append(out, l)
	}
	return out
}
