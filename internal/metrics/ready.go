package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// renewOp is the operation the agent reports for a failed heartbeat renewal.
const renewOp = "renew"

// minStale is the shortest silence after which a heartbeat that stopped
// renewing without reporting failures (a stuck loop) makes eipd unready.
// It sits well above the default renew-interval (500ms) and well below
// kubelet's default probe period (10s) times its failure threshold.
const minStale = 5 * time.Second

// staleIntervals: a heartbeat is stale after this many of its own latest
// renewal intervals without a renewal. The interval is measured rather
// than read from the configuration, which this package does not see and
// which changes live.
const staleIntervals = 3

// renewals is what readiness needs to know of the heartbeat: the two
// latest successful renewals, as observed on the local clock, and whether
// a failure came after them.
type renewals struct {
	last, prev time.Time
	failing    bool
}

func (r renewals) renewed(now time.Time) renewals {
	return renewals{last: now, prev: r.last}
}

func (r renewals) failed() renewals {
	r.failing = true
	return r
}

// check returns nil when the heartbeat renews, or why it does not.
func (r renewals) check(now time.Time) error {
	if r.last.IsZero() {
		return errors.New("heartbeat not renewed yet")
	}
	if r.failing {
		return fmt.Errorf("heartbeat renewal failing since the last success %v ago", now.Sub(r.last).Round(time.Millisecond))
	}
	stale := minStale
	if !r.prev.IsZero() {
		stale = max(stale, staleIntervals*r.last.Sub(r.prev))
	}
	if age := now.Sub(r.last); age > stale {
		return fmt.Errorf("heartbeat not renewed for %v (limit %v)", age.Round(time.Millisecond), stale)
	}
	return nil
}

// readiness is what Ready judges: the heartbeat's renewals, stamped on the
// local clock, and why this node would not take over an IP it should.
type readiness struct {
	clk clock.PassiveClock

	mu  sync.Mutex
	hbt renewals
	// why is why this node would not take over an IP it should; "" when
	// it would.
	why string
}

func (r *readiness) renewed() {
	now := r.clk.Now()
	r.mu.Lock()
	r.hbt = r.hbt.renewed(now)
	r.mu.Unlock()
}

func (r *readiness) failed() {
	r.mu.Lock()
	r.hbt = r.hbt.failed()
	r.mu.Unlock()
}

func (r *readiness) notServing(why string) {
	r.mu.Lock()
	r.why = why
	r.mu.Unlock()
}

// check returns nil when this node would serve and its heartbeat renews,
// or why not.
func (r *readiness) check() error {
	now := r.clk.Now()
	r.mu.Lock()
	hbt, why := r.hbt, r.why
	r.mu.Unlock()
	if why != "" {
		return fmt.Errorf("would not take over the IPs it should: %s", why)
	}
	return hbt.check(now)
}
