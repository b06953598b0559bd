package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"

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
	net := w.s.lan.lanConn.(*lanNet)
	for range 5 {
		w.step(w.s.desired.cfg.RenewInterval)
		sent := len(net.sent)
		w.s.lan.speaker.speak(w.clk.Now())
		assert.Equal(t, len(net.sent), sent+3, "a datagram to each peer")
		assert.Equal(t, net.last.Ages["node-b"], w.s.desired.cfg.RenewInterval, "node-b was heard a renew interval ago")
		for n, ages := range hearingA(100 * time.Millisecond) {
			w.arrive(n, lanPeerIPs[n], ages)
		}
	}
	w.lanTick(hearingA(100 * time.Millisecond))
	assert.Assert(t, !w.s.self.unheard)
	assert.DeepEqual(t, w.take(), []string(nil))
}

// node-b's last datagram arrives as the loop gets busy; node-c's and
// node-d's keep coming. When the loop resumes two and a half seconds later
// it judges node-b by when it last spoke, not by when the loop got round
// to reading it: dead, and, its successor, takes its IP over. (Read late, the datagram
// counted as a sign of life from when the loop read it: node-b stayed
// alive for another lease duration.)
func TestLoopLANJudgesByArrival(t *testing.T) {
	w := lanPeerHolds(t)
	others := hearing("node-c", "node-d")
	for range 5 {
		w.step(w.s.desired.cfg.RenewInterval)
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
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1", "update eip-198-18-100-1 holder=node-a successor=node-d"})
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
		w.step(w.s.desired.cfg.RenewInterval)
		sent := len(net.sent)
		w.s.lan.speaker.speak(w.clk.Now())
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
	w.s.lan.speaker.speak(w.clk.Now())
	assert.DeepEqual(t, net.last.Ages, map[string]time.Duration{"node-b": 100 * time.Millisecond, "node-c": 400*time.Millisecond + relayAllowance})
	assert.Equal(t, len(w.s.lan.speaker.take()), 1)
}

// node-e joins: its Node is in the cache, its heartbeat has not come
// through node-a's watch yet. Its datagram counts all the same when it
// comes from its Node's address, and node-a reports it, so that the peers
// that know node-e hear of it; a peer's report of it counts too. The loop
// does not judge it before its heartbeat comes. Silent for two lease
// durations, it is no longer reported. (Dropped until the loop knew it,
// a joining node went unheard for seconds at a cold start of fifty.)
func TestSpeakerHearsJoiningNode(t *testing.T) {
	w, net := lanWorld(t)
	w.addNode("node-e")
	node := w.nodeObj("node-e")
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.15"}}
	w.must(w.nodes.Update(node))
	w.pass()
	w.lanTick(nil)
	w.arrive("node-e", "198.18.0.99", nil)
	w.arrive("node-f", "198.18.0.16", nil)
	w.step(100 * time.Millisecond)
	w.s.lan.speaker.speak(w.clk.Now())
	assert.Equal(t, len(net.last.Ages), 0, "neither from its Node's address")

	w.arrive("node-e", "198.18.0.15", nil)
	w.step(100 * time.Millisecond)
	w.arrive("node-b", lanPeerIPs["node-b"], map[string]time.Duration{"node-e": 0})
	w.step(100 * time.Millisecond)
	w.s.lan.speaker.speak(w.clk.Now())
	assert.DeepEqual(t, net.last.Ages, map[string]time.Duration{
		"node-b": 100 * time.Millisecond, "node-e": 100*time.Millisecond + relayAllowance,
	})
	w.takeDatagrams()
	assert.Assert(t, !w.s.live.Known("node-e"))

	w.step(2 * w.s.desired.cfg.LeaseDuration)
	w.arrive("node-b", lanPeerIPs["node-b"], map[string]time.Duration{"node-e": 0})
	w.s.lan.speaker.speak(w.clk.Now())
	assert.DeepEqual(t, net.last.Ages, map[string]time.Duration{"node-b": 0})
}

// chanConn hands every datagram sent to a channel.
type chanConn chan lanlive.Message

func (c chanConn) Send(_ []lanlive.Peer, m lanlive.Message) error {
	c <- m
	return nil
}

func (c chanConn) Close() error { return nil }

// The speaker's goroutine takes in what arrives, wakes the loop, answers
// at once a peer that has no sign of this node, and speaks on its own
// ticker, with no loop running.
func TestSpeakerRuns(t *testing.T) {
	w, _ := lanWorld(t)
	w.pass()
	w.step(w.s.desired.cfg.RenewInterval)
	w.s.tick()
	conn := make(chanConn, 1)
	w.s.lan.speaker.configure(conn, w.s.desired.lanTimings())
	in, stop, done := make(chan lanlive.Received), make(chan struct{}), make(chan struct{})
	go func() {
		w.s.lan.speaker.run(in, stop)
		close(done)
	}()
	defer func() {
		close(stop)
		<-done
	}()
	in <- lanlive.Received{Source: netip.MustParseAddr(lanPeerIPs["node-b"]), Msg: lanlive.Message{From: "node-b", Ages: map[string]time.Duration{"node-c": 300 * time.Millisecond}}}
	wait(t, w.s.lan.speaker.kick)
	assert.DeepEqual(t, wait(t, conn), lanlive.Message{From: "node-a", Ages: map[string]time.Duration{
		"node-b": 0, "node-c": 300*time.Millisecond + relayAllowance,
	}})
	w.step(w.s.desired.cfg.RenewInterval)
	m := wait(t, conn)
	assert.DeepEqual(t, m, lanlive.Message{From: "node-a", Ages: map[string]time.Duration{
		"node-b": w.s.desired.cfg.RenewInterval, "node-c": w.s.desired.cfg.RenewInterval + 300*time.Millisecond + relayAllowance,
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

// bigLANWorld is lanWorld with six more peers, node-e to node-j
// (198.18.0.15 to .20): more than the fan-out reaches in one datagram.
func bigLANWorld(t *testing.T) (*world, *lanNet) {
	w, net := lanWorld(t)
	for i, n := range []string{"node-e", "node-f", "node-g", "node-h", "node-i", "node-j"} {
		w.addNode(n)
		node := w.nodeObj(n)
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.0.%d", 15+i)}}
		w.must(w.nodes.Update(node))
		w.lanHeartbeat(n)
	}
	w.pass()
	w.step(w.s.desired.cfg.RenewInterval)
	w.s.tick()
	return w, net
}

// With nine peers, each renew interval's datagram goes to the two peers
// after node-a and two more in turn. A peer whose sign grows suspect old
// is asked directly, at once; and a peer that asks is answered at once,
// alone.
func TestSpeakerFansOut(t *testing.T) {
	w, net := bigLANWorld(t)
	all := []string{"node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h", "node-i", "node-j"}
	from := func(n string) string {
		if ip, ok := lanPeerIPs[n]; ok {
			return ip
		}
		return fmt.Sprintf("198.18.0.%d", 11+slices.Index(all, n)+1)
	}
	// Everyone speaks once: node-a answers each, having no sign of it yet.
	for _, n := range all {
		w.arrive(n, from(n), map[string]time.Duration{"node-a": 0})
	}
	net.sent = nil
	w.step(100 * time.Millisecond)
	w.s.lan.speaker.speak(w.clk.Now())
	assert.DeepEqual(t, net.sent, []string{
		"198.18.0.12:9403 from node-a", "198.18.0.13:9403 from node-a", // node-b and node-c follow node-a
		"198.18.0.14:9403 from node-a", "198.18.0.15:9403 from node-a", // node-d and node-e, in turn
	})
	// node-b and node-c keep speaking; the others go quiet. A second after
	// their datagrams, node-a asks all of them at once.
	net.sent = nil
	for range 2 {
		w.step(w.s.desired.cfg.RenewInterval / 2)
		w.s.lan.speaker.ask(w.clk.Now())
		for _, n := range []string{"node-b", "node-c"} {
			w.arrive(n, from(n), map[string]time.Duration{"node-a": 0})
		}
	}
	assert.DeepEqual(t, net.sent, []string(nil))
	w.step(w.s.desired.suspectAfter() - w.s.desired.cfg.RenewInterval)
	w.s.lan.speaker.ask(w.clk.Now())
	assert.Equal(t, len(net.sent), 7, "node-d to node-j: %v", net.sent)
	// node-f asks node-a: it has no fresh sign of it. node-a answers it alone.
	net.sent = nil
	w.arrive("node-f", from("node-f"), map[string]time.Duration{"node-a": w.s.desired.suspectAfter()})
	assert.DeepEqual(t, net.sent, []string{"198.18.0.16:9403 from node-a"})
	net.sent = nil
	w.arrive("node-f", from("node-f"), map[string]time.Duration{"node-a": 0})
	assert.DeepEqual(t, net.sent, []string(nil))
}

// A flood of datagrams that ask node-a for an answer (each lacks a sign
// of it), genuine or replayed: node-a answers node-b at most twice a renew
// interval. (It answered every one: a hundred datagrams, a hundred
// answers.)
func TestSpeakerAnswersAPeerAtMostTwiceARenewInterval(t *testing.T) {
	w, net := lanWorld(t)
	w.pass()
	w.lanTick(nil)
	net.sent = nil
	for range 100 {
		w.step(w.s.desired.cfg.RenewInterval / 100)
		w.arrive("node-b", lanPeerIPs["node-b"], nil)
	}
	assert.Equal(t, len(net.sent), 2, "%v", net.sent)
}

// A datagram naming thousands of nodes the cluster does not have keeps
// only what it says of the nodes that count. (Every name was queued for
// the loop: up to 1,024 such datagrams of 64 KiB.)
func TestSpeakerKeepsOnlyKnownNodes(t *testing.T) {
	w, _ := lanWorld(t)
	w.pass()
	w.lanTick(nil)
	w.s.lan.speaker.take()
	ages := map[string]time.Duration{"node-a": 0, "node-c": 0}
	for i := range 5000 {
		ages[fmt.Sprintf("stranger-%d", i)] = 0
	}
	w.arrive("node-b", lanPeerIPs["node-b"], ages)
	q := w.s.lan.speaker.take()
	assert.Equal(t, len(q), 1)
	assert.DeepEqual(t, q[0].ages, map[string]time.Duration{"node-a": 0, "node-c": 0})
}
