package agent

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/eip-project/eip/internal/lease"
)

// renewal asks the heartbeat writer to renew with this status and duration.
type renewal struct {
	status   lease.HeartbeatStatus
	duration time.Duration
	timeout  time.Duration
	// factor is how many renew intervals and lease durations the renewal
	// lasts (state.renewal).
	factor int
	// remove deletes the heartbeat instead (graceful shutdown).
	remove bool
}

// renewResult reports one renewal: what was asked, when it was sent
// (monotonic) and whether it succeeded.
type renewResult struct {
	renewal
	sent time.Time
	took time.Duration
	err  error
}

// heartbeatLine carries the loop's renewals to the heartbeat writer (req)
// and their results back (res).
type heartbeatLine struct {
	req chan renewal
	res chan renewResult
}

func newHeartbeatLine() heartbeatLine {
	return heartbeatLine{req: make(chan renewal, 1), res: make(chan renewResult, 1)}
}

// offer hands r to the writer, unless the previous renewal is still in
// flight; it says whether the writer took it.
func (h heartbeatLine) offer(r renewal) bool {
	select {
	case h.req <- r:
		return true
	default:
		return false
	}
}

// exchange asks the heartbeat writer for req (a renewal, or the deletion
// at shutdown), after any renewal it has in flight, and waits up to wait
// on clk for the answer.
func (h heartbeatLine) exchange(req renewal, clk clock.Clock, wait time.Duration) error {
	deadline := clk.After(wait)
	for sent := false; ; {
		var reqs chan renewal
		if !sent {
			reqs = h.req
		}
		select {
		case reqs <- req:
			sent = true
		case r := <-h.res:
			if r.renewal == req {
				return r.err
			}
		case <-deadline:
			return fmt.Errorf("heartbeat: no answer within %s", wait)
		}
	}
}

// heartbeater owns this node's heartbeat Lease. It renews only when the
// owner loop asks, so a stuck loop stops the heartbeat too and peers take
// over, while the addresses the stuck loop no longer refreshes expire.
type heartbeater struct {
	a       *Agent
	current *coordinationv1.Lease
	// failed: the last write failed. One that timed out may still have
	// been applied, and then the next one meets a newer version.
	failed bool
}

func (h *heartbeater) run(requests <-chan renewal, results chan<- renewResult, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case r := <-requests:
			sent := h.a.clk.Now()
			var err error
			if r.remove {
				err = h.delete(r.timeout)
			} else {
				err = h.renew(r)
			}
			res := renewResult{renewal: r, sent: sent, took: h.a.clk.Since(sent), err: err}
			select {
			case results <- res:
			case <-stop:
				return
			}
		}
	}
}

func (h *heartbeater) renew(r renewal) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	err := h.write(ctx, r)
	if rewritten(err) {
		// Someone deleted or rewrote our heartbeat (by hand, or a peer's
		// garbage collection), or a renewal of ours that timed out was
		// applied after all: read it again and write it now, rather than
		// fail this renewal. Only the first is worth a warning; the second
		// is common on a loaded API server.
		log := h.a.log.Warn
		msg := "heartbeat Lease was deleted or changed by someone else; writing it again"
		if h.failed && apierrors.IsConflict(err) {
			log, msg = h.a.log.Info, "a heartbeat renewal that failed was applied after all; writing it again"
		}
		log(msg, "lease", lease.HeartbeatName(h.a.opt.Node), "err", err)
		h.current = nil
		if err = h.write(ctx, r); rewritten(err) {
			h.current = nil
		}
	}
	h.failed = err != nil
	return err
}

// rewritten: a write failed because the Lease is not the version this node
// last wrote or read: another write got there first.
func rewritten(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err)
}

// write renews the heartbeat once: updates the version last written or
// read, or creates it when there is none.
func (h *heartbeater) write(ctx context.Context, r renewal) error {
	if h.current == nil {
		cur, err := h.a.opt.Leases.Get(ctx, lease.HeartbeatName(h.a.opt.Node))
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		default:
			h.current = cur
		}
	}
	next := lease.RenewedHeartbeat(h.current, h.a.opt.Namespace, h.a.opt.Node, r.duration, r.status, h.a.clk.Now())
	var out *coordinationv1.Lease
	var err error
	if h.current == nil {
		out, err = h.a.opt.Leases.Create(ctx, next)
	} else {
		out, err = h.a.opt.Leases.Update(ctx, next)
	}
	if err != nil {
		return err
	}
	h.current = out
	return nil
}

// delete removes the heartbeat on graceful shutdown.
func (h *heartbeater) delete(timeout time.Duration) error {
	if h.current == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := h.a.opt.Leases.Delete(ctx, h.current.Name, h.current.ResourceVersion)
	if apierrors.IsNotFound(err) {
		return nil
	}
	h.current = nil
	return err
}
