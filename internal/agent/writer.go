package agent

import (
	"context"
	"net/netip"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/eip-project/eip/internal/lease"
)

// write is one lock write the owner loop asked for.
type write struct {
	ip      netip.Addr
	name    string
	action  lease.Action
	target  string                // the new holder, for acquire, create, handoff, release
	lease   *coordinationv1.Lease // what to create or update
	rv      string                // precondition of a delete
	dead    time.Time             // for a takeover: when the old holder was judged dead
	from    string                // for a takeover: the old holder
	timeout time.Duration
	// drops: its IP was unbound when it was dispatched (see state.drop).
	drops bool
	// round numbers an acquisition in the order they were sent (see
	// state.congestion).
	round int
}

// writeResult comes back to the owner loop.
type writeResult struct {
	write
	out *coordinationv1.Lease
	err error
}

// runWriter performs writes until stop. Several run at once, so that a
// cold start with a thousand IPs is not one round trip after another.
func (a *Agent) runWriter(jobs <-chan write, results chan<- writeResult, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case w := <-jobs:
			ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
			res := writeResult{write: w}
			switch w.action {
			case lease.Create:
				res.out, res.err = a.opt.Leases.Create(ctx, w.lease)
			case lease.Delete:
				res.err = a.opt.Leases.Delete(ctx, w.name, w.rv)
			default:
				res.out, res.err = a.opt.Leases.Update(ctx, w.lease)
			}
			cancel()
			select {
			case results <- res:
			case <-stop:
				return
			}
		}
	}
}
