package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"
)

// A round announces every IP held when it began once, in address order,
// spread evenly over the interval: woken at each slot the reannouncer
// asks for, at most one IP more than the slot's share goes out at once.
// The next round begins an interval later, with the IPs held then.
func TestReannouncerSpreadsARoundOverTheInterval(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var r reannouncer
	held := make([]netip.Addr, 100)
	for i := range held {
		held[i] = testIP(99 - i) // not in address order
	}
	asked := 0
	list := func() []netip.Addr { asked++; return slices.Clone(held) }
	every := 10 * time.Second

	now := t0
	var got []netip.Addr
	most := 0
	for now.Before(t0.Add(every)) {
		due := r.due(now, every, list)
		got = append(got, due...)
		most = max(most, len(due))
		next := r.next()
		assert.Assert(t, next.After(now), "next %v at %v", next, now)
		assert.Equal(t, next, next.Truncate(reannounceSlot), "woken only at the end of a slot")
		now = next
	}
	assert.Equal(t, asked, 1, "the held IPs are listed once a round")
	want := slices.Clone(held)
	slices.SortFunc(want, netip.Addr.Compare)
	assert.DeepEqual(t, got, want, cmpopts.EquateComparable(netip.Addr{}))
	// 100 IPs over 10 s is one a slot of 100 ms.
	assert.Assert(t, most <= 2, "%d at once", most)

	held = held[:3]
	assert.DeepEqual(t, r.due(now, every, list), []netip.Addr{testIP(97)}, cmpopts.EquateComparable(netip.Addr{}))
	assert.Equal(t, asked, 2)
}

// Beyond reannounceRate × the interval a round lasts longer, so that a
// node never sends more than the rate allows; and a round whose IPs were
// due while nobody asked (the loop ran late) sends what is due at once,
// at most the whole round, never twice.
func TestReannouncerRateBoundsTheRound(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var r reannouncer
	held := make([]netip.Addr, 20000)
	for i := range held {
		held[i] = testIP(i)
	}
	list := func() []netip.Addr { return held }
	every := 10 * time.Second
	seen := map[netip.Addr]int{}
	bound := reannounceRate*int(reannounceSlot)/int(time.Second) + 1
	now := t0
	for ; now.Before(t0.Add(20 * time.Second)); now = r.next() {
		due := r.due(now, every, list)
		assert.Assert(t, len(due) <= bound, "%d at %v", len(due), now.Sub(t0))
		for _, ip := range due {
			seen[ip]++
		}
	}
	assert.Assert(t, len(seen) < len(held), "20,000 IPs at 1,000 a second take 20 s, not %d", len(seen))
	// The round's end sends its last ones, and the next round's first.
	due := r.due(now, every, list)
	assert.Assert(t, len(due) <= bound, "%d at the round's end", len(due))
	for _, ip := range due {
		seen[ip]++
	}
	assert.Equal(t, len(seen), len(held))
	for ip, n := range seen {
		assert.Assert(t, n == 1 || ip == held[0] && n == 2, "%s: %d", ip, n)
	}

	// A new interval starts a new round at once.
	assert.Equal(t, len(r.due(now, time.Minute, list)), 1)
	assert.Equal(t, len(r.due(now.Add(2*time.Minute), time.Minute, list)), 1, "a new round, not a burst")
	// Off: nothing, and no wake.
	assert.Equal(t, len(r.due(now, 0, list)), 0)
	assert.Equal(t, r.next(), time.Time{})
}

// With announce-interval set, a holder announces each IP it holds again
// once per interval, a few at a time, and never one it no longer holds;
// while it may not write (its view of the locks may be stale) it
// announces nothing. Off by default: nothing is announced again.
func TestLoopReannouncesHeldIPs(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := defaultTestConfig()
		if on {
			cfg["announce-interval"] = "10s"
		}
		w := newWorld(t, "node-a", cfg)
		w.addNode("node-b")
		w.heartbeat("node-b", true)
		var ips []netip.Addr
		for i := range 20 {
			ips = append(ips, testIP(i))
			w.lock(testIP(i), "node-a")
		}
		w.addService("web", ips...)
		w.pass()
		for range 4 {
			w.tick("node-b")
		}
		assert.Equal(t, len(w.s.binder.bound), 20)
		w.take()

		// Three intervals: the first round began with the first tick,
		// when nothing was bound yet.
		at := map[string][]time.Duration{}
		t0 := w.clk.Now()
		most := 0
		for range 60 {
			w.tick("node-b")
			n := 0
			for _, c := range w.take() {
				ip, ok := strings.CutPrefix(c, "announce again ")
				assert.Assert(t, ok, "unexpected %q", c)
				at[ip] = append(at[ip], w.clk.Since(t0))
				n++
			}
			most = max(most, n)
		}
		if !on {
			assert.Equal(t, len(at), 0, "%v", at)
			continue
		}
		assert.Equal(t, len(at), 20, "%v", at)
		for ip, times := range at {
			assert.Assert(t, len(times) >= 2, "%s: %v", ip, times)
			for i := 1; i < len(times); i++ {
				gap := times[i] - times[i-1]
				assert.Assert(t, gap >= 9500*time.Millisecond && gap <= 10500*time.Millisecond, "%s announced again after %v: %v", ip, gap, times)
			}
		}
		assert.Assert(t, most <= 2, "%d at once", most)

		// Unbound here (the IP left the Service), never announced again.
		w.addService("web", ips[1:]...)
		w.pass()
		w.take()
		w.apiDown = true // once not writable, nothing goes out
		unwritable := 0
		for range 30 {
			before := w.s.writable(w.clk.Now())
			w.tick("node-b")
			calls := w.take()
			if before || w.s.writable(w.clk.Now()) {
				continue
			}
			unwritable++
			for _, c := range calls {
				assert.Assert(t, !strings.HasPrefix(c, "announce again "), "%q while not writable", c)
			}
		}
		assert.Assert(t, unwritable >= 20, "%d ticks not writable", unwritable)
		w.apiDown = false
		for range 20 {
			w.tick("node-b")
			for _, c := range w.take() {
				assert.Assert(t, c != "announce again "+ips[0].String(), "%q: no longer held", c)
			}
		}
	}
}
