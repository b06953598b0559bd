package agent

import (
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// Each way this node may refuse to bind an IP its lock lets it bind
// re-wakes the IP in its own way, and settle is where: at a time of its
// own, when whether this node may write changes, or at the loop's next
// tick on time.
func TestRefusalsWakeTheirIP(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.1")
	now := time.Unix(1_000_000, 0)
	later := now.Add(250 * time.Millisecond)
	cases := []struct {
		r          refusal
		at         time.Time // decided again then by its own time (zero: never so)
		onWritable bool      // decided again when whether this node may write changes
		onTime     bool      // decided again at the loop's next tick on time
	}{
		{r: refusal{}},
		{r: refusal{why: refusedLate}, onTime: true},
		{r: refusal{refusedLinkDown, later}, at: later, onWritable: true},
		{r: refusal{refusedFenced, later}, at: later, onWritable: true},
		{r: refusal{refusedUnheard, later}, at: later, onWritable: true},
		{r: refusal{refusedUnwritable, later}, at: later, onWritable: true},
		{r: refusal{refusedProbing, later}, at: later},
		{r: refusal{why: refusedProbing}}, // in use, and its probe's retry set by the next pass
		{r: refusal{refusedSlice, now}, at: now},
	}
	covered := map[refusalReason]bool{}
	for _, c := range cases {
		covered[c.r.why] = true
		t.Run(c.r.why.String(), func(t *testing.T) {
			settled := func() *schedule {
				s := newSchedule()
				s.settle(ip, settling{refusal: c.r})
				return &s
			}
			s := settled()
			var woken []netip.Addr
			if !c.at.IsZero() {
				s.ipWake.due(c.at.Add(-time.Nanosecond), func(ip netip.Addr) { woken = append(woken, ip) })
				assert.Check(t, len(woken) == 0, "woken before its time")
			}
			s.ipWake.due(now.Add(time.Hour), func(ip netip.Addr) { woken = append(woken, ip) })
			assert.Check(t, (len(woken) == 1) == !c.at.IsZero(), "woken by its own time: %v, want at %v", woken, c.at)

			s = settled()
			s.writableChanged(false)
			assert.Check(t, s.dirty[ip] == c.onWritable, "decided again when writability changes: %v", s.dirty[ip])

			s = settled()
			s.onTime()
			assert.Check(t, s.dirty[ip] == c.onTime, "decided again at a tick on time: %v", s.dirty[ip])
		})
	}
	for why := notRefused; why <= refusedSlice; why++ {
		assert.Check(t, covered[why], "refusal %s has no case", why)
	}
}

// A decision that read whether this node may write is decided again when
// that changes; one that did not is not, and one settled without judging
// it (its write in flight) keeps what the IP had.
func TestSettleKeepsWhatTheDecisionRead(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.1")
	s := newSchedule()
	s.settle(ip, settling{readWritable: true})
	assert.Check(t, s.writableDeps[ip])
	s.settle(ip, settling{keepDeps: true})
	assert.Check(t, s.writableDeps[ip])
	s.settle(ip, settling{})
	assert.Check(t, !s.writableDeps[ip])
}
