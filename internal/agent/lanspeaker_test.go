package agent

import (
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lanlive"
)

// The loop is busy for two and a half seconds (a long pass, or a tenth of
// a core): it neither ticks nor reads a datagram. The speaker still sends
// every renew interval, with its peers' ages as they are when it sends, so
// they keep hearing node-a, and when the loop resumes nothing moves. (From
// the loop, node-a sent nothing meanwhile: its peers reported it unheard,
// and it handed its IP away.)
func TestLoopLANBusyLoopStaysHeard(t *testing.T) {
	w := lanHolder(t)
	net := w.s.lanConn.(*lanNet)
	for range 5 {
		w.step(w.s.cfg.RenewInterval)
		sent := len(net.sent)
		w.s.speaker.speak(w.clk.Now())
		assert.Equal(t, len(net.sent), sent+3, "a datagram to each peer")
		assert.Equal(t, net.last.Ages["node-b"], w.s.cfg.RenewInterval, "node-b was heard a renew interval ago")
		for n, ages := range hearingA(100 * time.Millisecond) {
			w.arrive(n, lanPeerIPs[n], ages)
		}
	}
	w.lanTick(hearingA(100 * time.Millisecond))
	assert.Assert(t, !w.s.unheard)
	assert.DeepEqual(t, w.take(), []string(nil))
}

// node-b's last datagram arrives as the loop gets busy; node-c's and
// node-d's keep coming. When the loop resumes two and a half seconds later
// it judges node-b by when it last spoke, not by when the loop got round
// to reading it: dead, and takes its IP over. (Read late, the datagram
// counted as a sign of life from when the loop read it: node-b stayed
// alive for another lease duration.)
func TestLoopLANJudgesByArrival(t *testing.T) {
	w := lanPeerHolds(t)
	others := hearing("node-c", "node-d")
	for range 5 {
		w.step(w.s.cfg.RenewInterval)
		for _, n := range []string{"node-c", "node-d"} {
			w.arrive(n, lanPeerIPs[n], others[n])
		}
	}
	w.s.tick()
	w.pass()
	assert.Assert(t, !w.s.live.Alive("node-b", w.clk.Now()))
	// So late a tick was a stall: the loop renewed at once, and binds
	// from its next tick on time.
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.DeepEqual(t, w.renewals[len(w.renewals)-1], "4.5s update eligible=true duration=20s")
	w.lanTick(others)
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder=node-a", "bind 198.18.100.1"})
}

// A hung loop falls silent as its heartbeat would: the speaker sends
// while the loop's last progress is at most speakQuietAfter old, then
// nothing, until the loop progresses again.
func TestLoopLANHungLoopFallsSilent(t *testing.T) {
	w, net := lanWorld(t)
	all := hearing("node-b", "node-c", "node-d")
	for range 4 {
		w.lanTick(all)
	}
	hung := w.clk.Now()
	speak := func() int {
		w.step(w.s.cfg.RenewInterval)
		sent := len(net.sent)
		w.s.speaker.speak(w.clk.Now())
		return len(net.sent) - sent
	}
	for w.clk.Since(hung) < speakQuietAfter {
		assert.Equal(t, speak(), 3)
	}
	assert.Equal(t, speak(), 0, "silent %s after the loop's last progress", w.clk.Since(hung))
	assert.Equal(t, speak(), 0)
	w.s.tick()
	assert.Equal(t, speak(), 3)
}

// A datagram counts only from an address of the Node it names, and only
// from a node whose heartbeat the loop knows; the speaker reports every
// sign's age as it is when it sends.
func TestSpeakerReportsAges(t *testing.T) {
	w, net := lanWorld(t)
	w.pass()
	w.lanTick(nil)
	w.arrive("node-b", "198.18.0.99", map[string]time.Duration{"node-d": 0})
	w.arrive("node-e", "198.18.0.15", nil)
	w.arrive("node-b", lanPeerIPs["node-b"], map[string]time.Duration{"node-c": 300 * time.Millisecond, "node-a": 0, "node-e": 0})
	w.step(100 * time.Millisecond)
	w.s.speaker.speak(w.clk.Now())
	assert.DeepEqual(t, net.last.Ages, map[string]time.Duration{"node-b": 100 * time.Millisecond, "node-c": 400 * time.Millisecond})
	assert.Equal(t, len(w.s.speaker.take()), 1)
}

// chanConn hands every datagram sent to a channel.
type chanConn chan lanlive.Message

func (c chanConn) Send(_ []netip.AddrPort, b []byte) error {
	m, err := lanlive.Decode(b)
	c <- m
	return err
}

func (c chanConn) Close() error { return nil }

// The speaker's goroutine takes in what arrives, wakes the loop, and
// speaks on its own ticker, with no loop running.
func TestSpeakerRuns(t *testing.T) {
	w, _ := lanWorld(t)
	w.pass()
	w.step(w.s.cfg.RenewInterval)
	w.s.tick()
	conn := make(chanConn, 1)
	w.s.speaker.configure(conn, w.s.cfg.RenewInterval, w.s.cfg.LeaseDuration)
	in, stop, done := make(chan lanlive.Received), make(chan struct{}), make(chan struct{})
	go func() {
		w.s.speaker.run(in, stop)
		close(done)
	}()
	defer func() {
		close(stop)
		<-done
	}()
	in <- lanlive.Received{Source: netip.MustParseAddr(lanPeerIPs["node-b"]), Msg: lanlive.Message{From: "node-b", Ages: map[string]time.Duration{"node-c": 300 * time.Millisecond}}}
	wait(t, w.s.speaker.kick)
	w.step(w.s.cfg.RenewInterval)
	m := wait(t, conn)
	assert.DeepEqual(t, m, lanlive.Message{From: "node-a", Ages: map[string]time.Duration{
		"node-b": w.s.cfg.RenewInterval, "node-c": w.s.cfg.RenewInterval + 300*time.Millisecond,
	}})
}

// wait receives from c, failing the test if nothing comes in a minute (a
// deadlock, not a slow machine).
func wait[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatal("nothing came")
		panic("unreachable")
	}
}
