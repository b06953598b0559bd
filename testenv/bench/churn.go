package bench

import (
	"context"
	"fmt"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Churn is the lock writes made while one node's eipd leaves (SIGKILL) and
// returns every few seconds: a lock names a successor, and its holder
// rewrites it only once that successor has been gone for ten lease
// durations, so a node that flaps costs no write per IP beyond its first
// death's takeovers.
type Churn struct {
	IPs  int    `json:"ips"`
	Node string `json:"node"`
	// Period is one leave and return; Cycles how many the window held.
	Period time.Duration `json:"period"`
	Cycles int           `json:"cycles"`
	Window time.Duration `json:"window"`
	// Takeovers are the lock writes that changed an IP's holder: the
	// churning node's IPs, taken over at its first death (sticky gives
	// none back). SuccessorWrites changed only a lock's successor; Other
	// lock writes anything else.
	Takeovers       int `json:"takeovers"`
	SuccessorWrites int `json:"successorWrites"`
	OtherLockWrites int `json:"otherLockWrites"`
	// HeartbeatWrites are the heartbeat writes of every node.
	HeartbeatWrites int    `json:"heartbeatWrites"`
	Error           string `json:"error,omitempty"`
}

// churnPeriod is one cycle of the churn scenario: the node is dead for
// half of it and alive for the other half.
const churnPeriod = 6 * time.Second

// churn runs eipd on every node with ips IPs, then kills and restarts
// eipd on the last node every churnPeriod for window, counting the Lease
// writes from a watch.
func (e *env) churn(ctx context.Context, ips int, window time.Duration) (Churn, error) {
	node := e.nodes[len(e.nodes)-1].Name
	res := Churn{IPs: ips, Node: node, Period: churnPeriod, Window: window}
	e.log.Info("churn", "node", node, "ips", ips, "window", window)
	if err := e.reset(ctx, defaultTiming, true); err != nil {
		return res, err
	}
	if _, err := e.serviceIPs(ctx, ips); err != nil {
		return res, err
	}
	if err := waitFor(ctx, 2*deadline, fmt.Sprintf("%d IPs bound", ips), func() (bool, error) {
		total := 0
		for _, n := range e.nodes {
			c, err := e.boundCount(n.Name)
			if err != nil {
				return false, err
			}
			total += c
		}
		return total == ips, nil
	}); err != nil {
		return res, err
	}
	if err := pause(ctx, 3*defaultTiming.Lease); err != nil {
		return res, err
	}
	leases := e.k.CoordinationV1().Leases(testenv.Namespace)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: lease.ManagedByLabel})
	if err != nil {
		return res, fmt.Errorf("churn: list leases: %w", err)
	}
	seen := map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		seen[list.Items[i].Name] = &list.Items[i]
	}
	// The client's timeout ends a watch: it is watched again from the
	// last version seen.
	rv := list.ResourceVersion
	rewatch := func() (watch.Interface, error) {
		w, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: lease.ManagedByLabel, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			return nil, fmt.Errorf("churn: watch leases: %w", err)
		}
		return w, nil
	}
	w, err := rewatch()
	if err != nil {
		return res, err
	}
	defer func() { w.Stop() }()
	end := time.After(window)
	cycle := time.NewTicker(churnPeriod / 2)
	defer cycle.Stop()
	up := true
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-end:
			return res, nil
		case <-cycle.C:
			if up {
				err = e.c.StopDaemon(node, syscall.SIGKILL)
				res.Cycles++
			} else {
				err = e.c.StartDaemon(node, e.args...)
			}
			if err != nil {
				return res, err
			}
			up = !up
		case ev, ok := <-w.ResultChan():
			if !ok {
				if w, err = rewatch(); err != nil {
					return res, err
				}
				continue
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease {
				return res, fmt.Errorf("churn: the Lease watch failed: %v", ev.Object)
			}
			rv = l.ResourceVersion
			if ev.Type == watch.Bookmark {
				continue
			}
			res.count(seen[l.Name], l, ev.Type)
			seen[l.Name] = l
		}
	}
}

// count files one Lease event: what the write changed.
func (c *Churn) count(before, after *coordinationv1.Lease, t watch.EventType) {
	if after.Labels[lease.RoleLabel] == lease.RoleHeartbeat {
		c.HeartbeatWrites++
		return
	}
	holder := func(l *coordinationv1.Lease) string {
		if l == nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	switch {
	case t == watch.Modified && holder(before) != holder(after):
		c.Takeovers++
	case t == watch.Modified && before != nil && before.Annotations[lease.AnnotationSuccessor] != after.Annotations[lease.AnnotationSuccessor]:
		c.SuccessorWrites++
	default:
		c.OtherLockWrites++
	}
}

// churnFigures are the rows of the churn scenario, if it ran.
func churnFigures(c *Churn) []Figure {
	if c == nil {
		return nil
	}
	what := fmt.Sprintf("%s leaving and returning every %s, %d IPs, %s", c.Node, c.Period, c.IPs, c.Window)
	succ := NewFigure("lock successor rewrites, "+what, UnitCount, []float64{float64(c.SuccessorWrites)}, Target{Stat: "max", Limit: 0})
	succ.Note = joinNotes(fmt.Sprintf("%d cycles; %d takeovers (its IPs, at its first death), %d other lock writes, %d heartbeat writes",
		c.Cycles, c.Takeovers, c.OtherLockWrites, c.HeartbeatWrites), c.Error)
	return []Figure{succ}
}
