package agent

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// loopHungAfter is how long the owner loop may go without progress (a
// tick, an input handled, an address bound or unbound) before the
// watchdog calls it hung. The addresses on eipd's device live as long as
// the process, and a peer that takes an IP over never binds it while this
// node still answers for it (addrConflicts), so a loop that hangs with the
// process alive would keep its IPs answered here and bound nowhere else,
// and apply no change, forever. Ticks alone are not progress enough: with
// a tenth of a core, a node unbinding 1,700 IPs at once went 30 s without
// a tick. A hung loop's IPs go to a peer that much later than a dead
// eipd's; until then the node's kernel keeps answering for them.
const loopHungAfter = 30 * time.Second

// watchdog reports a hung owner loop, on a goroutine of its own: the loop
// cannot report itself.
type watchdog struct {
	clk  clock.WithTicker
	hung func(quiet time.Duration)

	mu    sync.Mutex
	last  time.Time // the loop's last progress; zero: not armed
	fired bool
}

func newWatchdog(clk clock.WithTicker, hung func(time.Duration)) *watchdog {
	return &watchdog{clk: clk, hung: hung}
}

// progressed is called by the owner loop on every tick, late or not, and
// whenever it handled an input or bound or unbound an address.
func (w *watchdog) progressed(now time.Time) {
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

// quiet is how long the loop has gone without progress at now; armed is
// false before its first progress and after disarm.
func (w *watchdog) quiet(now time.Time) (quiet time.Duration, armed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Sub(w.last), !w.last.IsZero()
}

// check calls hung once the loop's last progress is loopHungAfter old.
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
