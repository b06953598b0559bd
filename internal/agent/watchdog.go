package agent

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// loopHungAfter is how long the owner loop may go without a tick before
// the watchdog calls it hung. The addresses on eipd's device live as long
// as the process, and a peer that takes an IP over never binds it while
// this node still answers for it (addrConflicts), so a loop that hangs
// with the process alive would keep its IPs answered here and bound
// nowhere else, and apply no change, forever. The bound is far above
// lateness: a tick comes every renew interval, a full pass at 10,000 IPs
// costs well under 100 ms of CPU, and even with a tenth of a core a pass
// ends within a second or two. A hung loop's IPs go to a peer that much
// later than a dead eipd's; until then the node's kernel keeps answering
// for them.
const loopHungAfter = 30 * time.Second

// watchdog reports a hung owner loop, on a goroutine of its own: the loop
// cannot report itself.
type watchdog struct {
	clk  clock.WithTicker
	hung func(quiet time.Duration)

	mu    sync.Mutex
	last  time.Time // the loop's last tick; zero: not armed
	fired bool
}

func newWatchdog(clk clock.WithTicker, hung func(time.Duration)) *watchdog {
	return &watchdog{clk: clk, hung: hung}
}

// ticked is called by the owner loop on every tick, late or not.
func (w *watchdog) ticked(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = now
}

// disarm stops the watchdog for a shutdown, whose hand-offs may wait for
// a slow API server without ticking.
func (w *watchdog) disarm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = time.Time{}
}

// check calls hung once the loop's last tick is loopHungAfter old.
func (w *watchdog) check(now time.Time) {
	w.mu.Lock()
	quiet := now.Sub(w.last)
	fire := !w.last.IsZero() && !w.fired && quiet >= loopHungAfter
	w.fired = w.fired || fire
	w.mu.Unlock()
	if fire {
		w.hung(quiet)
	}
}

// run checks every second until stop is closed.
func (w *watchdog) run(stop <-chan struct{}) {
	t := w.clk.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
			w.check(w.clk.Now())
		}
	}
}
