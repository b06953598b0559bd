package agent

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// The budget lets eventBurst Events of each type through at once and one
// more each eventRefill; what it leaves out is said in one summary, due
// summaryEvery after the first left out, in a Warning once a Warning was
// left out.
func TestEventBudget(t *testing.T) {
	// Started long enough ago for the Normal budget to have filled.
	b := newEventBudget(t0.Add(-eventBurst * eventRefill))
	now := t0
	for i := range eventBurst {
		assert.Assert(t, b.allow(now, corev1.EventTypeNormal, "ns", "Bound"), "event %d", i)
	}
	for range 250 {
		assert.Assert(t, !b.allow(now, corev1.EventTypeNormal, "ns", "Bound"))
	}
	assert.Assert(t, !b.allow(now, corev1.EventTypeNormal, "ns", "TakenOver"))
	assert.Assert(t, b.allow(now, corev1.EventTypeWarning, "ns", "AddressConflict"), "Warnings have their own budget")
	_, _, due := b.summary(now.Add(summaryEvery - time.Millisecond))
	assert.Assert(t, !due, "a summary before summaryEvery")

	now = now.Add(eventRefill)
	assert.Assert(t, b.allow(now, corev1.EventTypeNormal, "ns", "Bound"), "refilled")
	assert.Assert(t, !b.allow(now, corev1.EventTypeNormal, "ns", "Bound"))

	kind, msg, due := b.summary(t0.Add(summaryEvery))
	assert.Assert(t, due)
	assert.Equal(t, kind, corev1.EventTypeNormal)
	assert.Assert(t, strings.HasPrefix(msg, "252 Events on Services not posted in the last 10s (251 Normal Bound, 1 Normal TakenOver)"), msg)
	_, _, due = b.summary(t0.Add(time.Hour))
	assert.Assert(t, !due, "a second summary of nothing")

	// Tokens came back over the hour, up to the burst; the first left out
	// starts the next summary's time, and a Warning left out makes it a
	// Warning.
	later := t0.Add(time.Hour)
	n := 0
	for b.allow(later, corev1.EventTypeNormal, "ns", "Bound") {
		n++
	}
	assert.Equal(t, n, eventBurst)
	for b.allow(later, corev1.EventTypeWarning, "ns", "Unheard") {
	}
	assert.Assert(t, !b.allow(later.Add(time.Second/2), corev1.EventTypeWarning, "ns", "Unheard"))
	_, _, due = b.summary(later.Add(summaryEvery - time.Millisecond))
	assert.Assert(t, !due, "counted from the first left out")
	kind, msg, due = b.summary(later.Add(summaryEvery))
	assert.Assert(t, due)
	assert.Equal(t, kind, corev1.EventTypeWarning)
	assert.Assert(t, strings.HasPrefix(msg, "3 Events on Services not posted in the last 10s (1 Normal Bound, 2 Warning Unheard)"), msg)
}

// A node that just started has startBurst Normal Events, one more each
// eventRefill, and builds its burst up from there; its Warnings have their
// whole budget.
// Each namespace has its own Warning budget: one tenant's 1,000 refused
// Services are summarised past the budget, and another tenant's conflict
// is still posted. A budget full again is forgotten at the next summary.
func TestEventBudgetWarningsPerNamespace(t *testing.T) {
	now := t0
	b := newEventBudget(now)
	posted := 0
	for range 1000 {
		if b.allow(now, corev1.EventTypeWarning, "team-b", "AddressRejected") {
			posted++
		}
	}
	assert.Equal(t, posted, eventBurst)
	assert.Assert(t, b.allow(now, corev1.EventTypeWarning, "team-a", "AddressConflict"), "team-b's refusals pushed team-a's conflict out")
	_, msg, ok := b.summary(now.Add(summaryEvery))
	assert.Assert(t, ok)
	assert.Assert(t, strings.Contains(msg, "900 Warning AddressRejected"), msg)
	// Long after, team-b's refusals go past its budget again: the
	// summary then forgets team-a's budget, full again, and not team-b's.
	later := now.Add(2 * eventBurst * eventRefill)
	for b.allow(later, corev1.EventTypeWarning, "team-b", "AddressRejected") {
	}
	_, _, ok = b.summary(later.Add(summaryEvery))
	assert.Assert(t, ok)
	_, kept := b.limits[warningOf("team-a")]
	assert.Assert(t, !kept, "a full budget is kept")
	_, kept = b.limits[warningOf("team-b")]
	assert.Assert(t, kept, "a budget still refilling was forgotten")
}

func TestEventBudgetOfANodeJustStarted(t *testing.T) {
	b := newEventBudget(t0)
	for i := range startBurst {
		assert.Assert(t, b.allow(t0, corev1.EventTypeNormal, "ns", "Bound"), "Normal Event %d at start", i)
	}
	assert.Assert(t, !b.allow(t0, corev1.EventTypeNormal, "ns", "Bound"))
	for i := range eventBurst {
		assert.Assert(t, b.allow(t0, corev1.EventTypeWarning, "ns", "AddressConflict"), "Warning %d at start", i)
	}
	assert.Assert(t, !b.allow(t0, corev1.EventTypeWarning, "ns", "AddressConflict"))
	now := t0.Add(eventRefill)
	assert.Assert(t, b.allow(now, corev1.EventTypeNormal, "ns", "Bound"), "one a second")
	assert.Assert(t, !b.allow(now, corev1.EventTypeNormal, "ns", "Bound"))
	now = t0.Add(time.Hour)
	n := 0
	for b.allow(now, corev1.EventTypeNormal, "ns", "Bound") {
		n++
	}
	assert.Equal(t, n, eventBurst, "the whole burst once it has filled")
	kind, msg, due := b.summary(t0.Add(summaryEvery))
	assert.Assert(t, due)
	assert.Equal(t, kind, corev1.EventTypeWarning)
	assert.Assert(t, strings.HasPrefix(msg, "4 Events on Services not posted in the last 10s (3 Normal Bound, 1 Warning AddressConflict)"), msg)
}

// A node that binds more IPs at once than its Event budget allows posts a
// Bound Event on the Services of as many as the budget lets through, and
// summaryEvery later one Event on its Node counting the others: every bind
// is either told on its Service or counted, and the count of Events stays
// within the budget whatever the number of IPs.
func TestLoopEventsBeyondTheBudgetAreSummarised(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	const n = 300
	for i := range n {
		w.addService("web-"+strconv.Itoa(i), testIP(i))
	}
	w.pass()
	for range 4 {
		w.tick()
	}
	binds := 0
	for _, c := range w.take() {
		if strings.HasPrefix(c, "bind ") {
			binds++
		}
	}
	assert.Equal(t, binds, n)
	posted, summaries := recorded(w)
	assert.Equal(t, len(summaries), 0)
	// The node started with the world: its Normal budget fills one a
	// second from startBurst then.
	allowed := startBurst + int(w.clk.Since(t0)/eventRefill)
	assert.Assert(t, posted <= allowed, "%d Bound Events posted, the budget allows %d", posted, allowed)

	for range int(summaryEvery / w.s.desired.cfg.RenewInterval) {
		w.tick()
	}
	more, summaries := recorded(w)
	assert.Equal(t, more, 0)
	assert.Equal(t, len(summaries), 1)
	left := n - posted
	want := fmt.Sprintf("Normal EventsSummarised %d Events on Services not posted in the last ", left)
	assert.Assert(t, strings.HasPrefix(summaries[0], want), summaries[0])
	assert.Assert(t, strings.Contains(summaries[0], fmt.Sprintf("(%d Normal Bound)", left)), summaries[0])
}

// recorded drains the Events the loop posted: how many Bound Events, and
// the summaries.
func recorded(w *world) (bound int, summaries []string) {
	ch := w.a.recorder.(*record.FakeRecorder).Events
	for {
		select {
		case e := <-ch:
			switch {
			case strings.HasPrefix(e, "Normal Bound "):
				bound++
			case strings.Contains(e, " EventsSummarised "):
				summaries = append(summaries, e)
			default:
				w.t.Fatalf("unexpected Event %q", e)
			}
		default:
			return bound, summaries
		}
	}
}

// A ConfigMap that leaves many Services' IPs outside every range rejects
// them all at once: the Warnings that say so come out of the node's
// budget like any other Event, and the rest are summarised.
func TestLoopRejectionsBeyondTheBudgetAreSummarised(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	const n = 300
	for i := range n {
		// 198.19.0.0/16 is outside the test ConfigMap's range.
		w.addService("web-"+strconv.Itoa(i), netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(1 + i%250)}))
	}
	w.pass()
	for range int(summaryEvery/w.s.desired.cfg.RenewInterval) + 1 {
		w.tick()
	}
	assert.Equal(t, len(w.take()), 0, "no rejected IP is bound or written")
	rejections, summaries := 0, []string{}
	ch := w.a.recorder.(*record.FakeRecorder).Events
	for len(ch) > 0 {
		switch e := <-ch; {
		case strings.HasPrefix(e, "Warning AddressRejected "):
			rejections++
		case strings.HasPrefix(e, "Warning EventsSummarised "):
			summaries = append(summaries, e)
		default:
			t.Fatalf("unexpected Event %q", e)
		}
	}
	assert.Equal(t, rejections, eventBurst)
	assert.Equal(t, len(summaries), 1)
	assert.Assert(t, strings.Contains(summaries[0], fmt.Sprintf("(%d Warning AddressRejected)", n-eventBurst)), summaries[0])
}
