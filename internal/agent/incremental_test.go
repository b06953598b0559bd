package agent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The loop runs a reconcile pass only for inputs that may change a decision
// (passDue, heartbeatsRenewed); every other input is answered without one.
// Over random sequences of inputs (ticks and renewals, peers renewing,
// falling silent and coming back, Services created and deleted, locks
// written by peers), whenever the loop skips a pass, a full pass run at
// that moment must act not at all: no API write, no address change. So the
// skipping loop reaches the decisions of a loop that passes on every input.
func TestSkippedPassesWouldActNot(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { skippedPassesWouldActNot(t, seed) })
	}
}

func skippedPassesWouldActNot(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 15))
	cfg := defaultTestConfig()
	if seed%2 == 1 { // the tuned lease, whose expiry has a grace
		cfg["lease-duration"], cfg["renew-interval"] = "1s", "250ms"
	}
	w := newWorld(t, "node-a", cfg)
	peers := []string{"node-b", "node-c", "node-d"}
	silent := map[string]bool{}
	for _, p := range peers {
		w.addNode(p)
		w.heartbeat(p, true)
	}
	nextIP, svcs := 0, []string{}
	addService := func() {
		name := fmt.Sprintf("svc-%d", nextIP)
		w.addService(name, testIP(nextIP))
		svcs = append(svcs, name)
		nextIP++
	}
	for range 12 {
		addService()
	}
	w.pass()
	passes, skipped := 0, 0
	// either runs the pass the loop decided on, or checks that a full
	// pass would not have acted.
	either := func(pass bool, what string) {
		if pass {
			passes++
			w.pass()
			return
		}
		skipped++
		w.take()
		// The check must not change what the loop remembers of its
		// last pass, or it would hide the loop's own mistakes.
		lastPass, passWritable, passVerdicts, wake := w.s.lastPass, w.s.passWritable, w.s.passVerdicts, w.s.wake
		w.s.reconcile()
		w.s.lastPass, w.s.passWritable, w.s.passVerdicts, w.s.wake = lastPass, passWritable, passVerdicts, wake
		if calls := w.take(); len(calls) > 0 || len(w.s.jobs) > 0 {
			t.Fatalf("seed %d: the loop skipped a pass after %s at %s, but a pass acts: %v, %d writes queued",
				seed, what, w.clk.Now().Sub(t0), calls, len(w.s.jobs))
		}
	}
	for range 300 {
		// The timer was set before the clock moved.
		next := w.s.nextWake(w.clk.Now())
		w.step(time.Duration(rnd.IntN(300)) * time.Millisecond)
		if !next.IsZero() && !w.clk.Now().Before(next) {
			either(w.s.passDue(w.clk.Now()), "the timer")
		}
		switch r := rnd.IntN(20); {
		case r < 8: // the renew tick, then the renewal
			w.s.tick()
			either(w.s.passDue(w.clk.Now()), "the tick")
			select {
			case req := <-w.s.renewReq:
				// The fake API server puts the renewal in the cache
				// at once, so its watch event is answered first: the
				// other order has that event still waiting, which
				// runs the pass.
				sent := w.clk.Now()
				err := w.s.hb.renew(req)
				either(w.s.heartbeatsRenewed(), "our own heartbeat's event")
				w.s.renewed(renewResult{renewal: req, sent: sent, err: err})
				either(w.s.passDue(w.clk.Now()), "a renewal's result")
			default:
			}
		case r < 14: // the peers that are not silent renew
			for _, p := range peers {
				if !silent[p] {
					w.heartbeat(p, true)
					either(w.s.heartbeatsRenewed(), p+"'s renewal")
				}
			}
		case r < 15:
			p := peers[rnd.IntN(len(peers))]
			silent[p] = !silent[p]
		case r < 17:
			addService()
			either(true, "a new Service")
		case r < 18 && len(svcs) > 0:
			k := rnd.IntN(len(svcs))
			w.must(w.svcs.Delete(w.svcObj(svcs[k])))
			svcs = slices.Delete(svcs, k, k+1)
			w.s.dirtySvc = true
			either(true, "a deleted Service")
		default: // a live peer takes a lock this node does not hold
			ip := testIP(rnd.IntN(nextIP))
			p := peers[rnd.IntN(len(peers))]
			if l := w.get(leaseName(ip)); !silent[p] && (l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-a") {
				w.lock(ip, p)
				either(true, "a lock written by "+p)
			}
		}
	}
	if skipped == 0 || passes == 0 {
		t.Fatalf("seed %d: %d passes, %d skipped: the sequence did not exercise both", seed, passes, skipped)
	}
}
