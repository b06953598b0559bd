package endpoints

import (
	"context"
	"net/netip"
)

// Checker asks kube-proxy at an address (KubeProxy.Check).
type Checker interface {
	Check(ctx context.Context, addr netip.AddrPort) Verdict
}

// Runner runs the checks that Checks.Judge starts: at most slots at a
// time, each on a goroutine of its own that sends its Result to out; the
// others wait in a queue of at most queued, as data, with no goroutine.
// A check whose node was forgotten (Cancel) is cancelled, running or
// waiting. It belongs to the goroutine that reads out: Start, Finished and
// Cancel are called from there alone.
type Runner struct {
	check   Checker
	ctx     context.Context
	out     chan<- Result
	slots   int
	queued  int
	waiting []job
	running map[Key]running
}

type job struct {
	key  Key
	gen  uint64
	addr netip.AddrPort
}

type running struct {
	gen    uint64
	cancel context.CancelFunc
}

// NewRunner runs checks with check, sending their results to out, until
// ctx ends.
func NewRunner(ctx context.Context, check Checker, out chan<- Result, slots, queued int) *Runner {
	return &Runner{check: check, ctx: ctx, out: out, slots: slots, queued: queued, running: map[Key]running{}}
}

// Start runs check gen of k against addr now if a slot is free, or later;
// it returns false when the queue is full (the check is not made).
func (r *Runner) Start(k Key, gen uint64, addr netip.AddrPort) bool {
	if len(r.running) >= r.slots && len(r.waiting) >= r.queued {
		return false
	}
	r.waiting = append(r.waiting, job{k, gen, addr})
	r.next()
	return true
}

// Finished frees the slot of res's check, which the loop received from
// out, and starts the next one waiting.
func (r *Runner) Finished(res Result) {
	if run, ok := r.running[res.Key]; ok && run.gen == res.Gen {
		run.cancel()
		delete(r.running, res.Key)
	}
	r.next()
}

// Cancel cancels the checks of keys, running or waiting: their nodes were
// forgotten (Checks.Sweep). A running one's slot is free at once; its
// result, if it still comes, is stale (Checks.Done ignores it).
func (r *Runner) Cancel(keys []Key) {
	if len(keys) == 0 {
		return
	}
	gone := make(map[Key]bool, len(keys))
	for _, k := range keys {
		gone[k] = true
		if run, ok := r.running[k]; ok {
			run.cancel()
			delete(r.running, k)
		}
	}
	kept := r.waiting[:0]
	for _, j := range r.waiting {
		if !gone[j.key] {
			kept = append(kept, j)
		}
	}
	clear(r.waiting[len(kept):])
	r.waiting = kept
	r.next()
}

// InFlight is how many checks run and how many wait.
func (r *Runner) InFlight() (running, waiting int) { return len(r.running), len(r.waiting) }

// next starts waiting checks while slots are free.
func (r *Runner) next() {
	for len(r.running) < r.slots && len(r.waiting) > 0 {
		j := r.waiting[0]
		r.waiting[0] = job{}
		r.waiting = r.waiting[1:]
		if run, ok := r.running[j.key]; ok {
			run.cancel() // checked anew: the older check's verdict is stale
		}
		ctx, cancel := context.WithCancel(r.ctx)
		r.running[j.key] = running{gen: j.gen, cancel: cancel}
		go func() {
			res := Result{Key: j.key, Gen: j.gen, Verdict: r.check.Check(ctx, j.addr)}
			select {
			case r.out <- res:
			case <-ctx.Done():
			}
		}()
	}
}
