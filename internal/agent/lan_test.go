package agent

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
	"github.com/eip-project/eip/internal/policy"
)

// lanNet is the fake LAN of a world: what the loop sends, by destination.
type lanNet struct {
	port uint16
	sent []string
	last lanlive.Message // the latest message sent
	// legacy are the peers sent the format before as well.
	legacy map[string]bool
}

func (n *lanNet) Send(to []lanlive.Peer, m lanlive.Message) error {
	for _, p := range to {
		n.sent = append(n.sent, fmt.Sprintf("%s from %s", p.Addr, m.From))
		if p.Legacy {
			if n.legacy == nil {
				n.legacy = map[string]bool{}
			}
			n.legacy[p.Node] = true
		}
	}
	n.last = m
	return nil
}

func (n *lanNet) Close() error { return nil }

// lanWorld is node-a with liveness over the LAN, and peers node-b, node-c
// and node-d (198.18.0.12 to .14) whose heartbeats name the liveness port.
func lanWorld(t *testing.T) (*world, *lanNet) {
	return lanWorldWith(t, defaultTestConfig())
}

// lanWorldWith is lanWorld with the given ConfigMap data.
func lanWorldWith(t *testing.T, cfg map[string]string) (*world, *lanNet) {
	w := newWorld(t, "node-a", cfg)
	net := &lanNet{}
	w.s.lan.listen = func(port uint16, _ lanlive.SentBy, _ chan<- lanlive.Received) (LANConn, error) {
		net.port = port
		return net, nil
	}
	w.s.configureLAN()
	for i, n := range []string{"node-a", "node-b", "node-c", "node-d"} {
		if n != "node-a" {
			w.addNode(n)
		}
		node := w.nodeObj(n)
		node.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8::%d", 11+i)},
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.0.%d", 11+i)},
		}
		w.must(w.nodes.Update(node))
	}
	for _, n := range []string{"node-b", "node-c", "node-d"} {
		w.lanHeartbeat(n)
	}
	return w, net
}

// lanHeartbeat renews node's heartbeat as a slow peer would: it names the
// liveness port and its MAC, and lasts ten lease durations.
func (w *world) lanHeartbeat(node string) {
	var cur *coordinationv1.Lease
	if obj, ok, _ := w.leases.GetByKey(testNS + "/" + lease.HeartbeatName(node)); ok {
		cur = obj.(*coordinationv1.Lease)
	}
	l := lease.RenewedHeartbeat(cur, testNS, node, 10*w.s.desired.cfg.LeaseDuration,
		lease.HeartbeatStatus{Eligible: true, LivenessPort: 9403, MACs: lease.FormatMACs([]net.HardwareAddr{peerMAC(node)})}, w.clk.Now())
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
}

// hear delivers a datagram from node, sent from source, with ages, and
// has the loop take it in.
func (w *world) hear(node, source string, ages map[string]time.Duration) {
	w.arrive(node, source, ages)
	w.takeDatagrams()
}

// arrive delivers a datagram to the speaker alone, as while the loop is
// busy, through a lanlive.Session that vouches for its sender with
// nodeAddrs.sentBy, as the liveness socket does: one from an address that is
// not its Node's is dropped there.
func (w *world) arrive(node, source string, ages map[string]time.Duration) {
	const boot = 1
	if w.lanSession == nil {
		w.lanSession = lanlive.NewSession(w.a.opt.Node, boot, w.s.lan.nodes.sentBy)
	}
	w.lanSeq++
	d := lanlive.Datagram{Message: lanlive.Message{From: node, Ages: ages}, Boot: boot, Seq: w.lanSeq, To: w.a.opt.Node, ToBoot: boot}
	from := netip.MustParseAddr(source)
	if kind, drop := w.lanSession.Admit(lanlive.Arrival{Datagram: d, Source: from, At: w.clk.Now(), Key: 1}); drop == lanlive.Kept {
		w.s.lan.speaker.receive(lanlive.Received{Source: from, Msg: d.Message, Kind: kind})
	}
}

// hearing is what the peers that speak send: each reports a fresh sign of
// node-a and of every other speaker.
func hearing(peers ...string) map[string]map[string]time.Duration {
	out := map[string]map[string]time.Duration{}
	for _, p := range peers {
		out[p] = map[string]time.Duration{"node-a": 100 * time.Millisecond}
		for _, q := range peers {
			if q != p {
				out[p][q] = 0
			}
		}
	}
	return out
}

// hearingA is what the peers send while they hear each other and their
// last sign of node-a is lastOfA old.
func hearingA(lastOfA time.Duration) map[string]map[string]time.Duration {
	return map[string]map[string]time.Duration{
		"node-b": {"node-a": lastOfA, "node-c": 0},
		"node-c": {"node-a": lastOfA, "node-b": 0},
		"node-d": {"node-a": lastOfA, "node-b": 0},
	}
}

// lanPeerIPs are the addresses the peers' datagrams come from.
var lanPeerIPs = map[string]string{"node-b": "198.18.0.12", "node-c": "198.18.0.13", "node-d": "198.18.0.14"}

// lanTick is one renew interval on the LAN: the loop's tick, this node's
// datagram, then one from each of the peers that speak, then a pass.
func (w *world) lanTick(speak map[string]map[string]time.Duration) {
	w.step(w.s.desired.cfg.RenewInterval)
	w.s.tick()
	w.s.lan.speaker.speak(w.clk.Now())
	for _, n := range slices.Sorted(maps.Keys(speak)) {
		w.hear(n, lanPeerIPs[n], speak[n])
	}
	w.pass()
}

// Peers heard: node-a sends each its datagram at its IPv4 InternalIP
// every tick, and renews its heartbeat every ten ticks, naming its port,
// with a duration of ten lease durations.
func TestLoopLANSlowHeartbeat(t *testing.T) {
	w, net := lanWorld(t)
	assert.Equal(t, net.port, uint16(9403))
	both := hearing("node-b", "node-c", "node-d")
	w.pass()
	for range 22 {
		w.lanTick(both)
	}
	first := slices.Sorted(slices.Values(net.sent[:3]))
	assert.DeepEqual(t, first, []string{
		"198.18.0.12:9403 from node-a", "198.18.0.13:9403 from node-a", "198.18.0.14:9403 from node-a",
	})
	hb := w.get(lease.HeartbeatName("node-a"))
	assert.Equal(t, hb.Annotations[lease.AnnotationLivenessPort], "9403")
	assert.DeepEqual(t, w.renewals, []string{
		"500ms create eligible=true duration=2s",
		"1s update eligible=true duration=20s",
		"6s update eligible=true duration=20s",
		"11s update eligible=true duration=20s",
	})
}

// join adds node, whose first heartbeat names the liveness port, as a
// node that starts eipd would.
func (w *world) join(node string) {
	w.addNode(node)
	w.lanHeartbeat(node)
	w.leaseChanged(w.get(lease.HeartbeatName(node)))
}

// Nodes that join change the slow factor (with heartbeat-writes 0.4, five
// renew intervals per node) but nothing node-a says of itself: it keeps
// its pace, and the renewal that comes at it writes the new duration. It
// used to rewrite its heartbeat whenever the factor changed: at a cold
// start of fifty nodes, every node for every second node that joined
// beyond twenty.
func TestLoopLANJoinsKeepTheHeartbeatsPace(t *testing.T) {
	cfg := defaultTestConfig()
	cfg["heartbeat-writes"] = "0.4"
	w, _ := lanWorldWith(t, cfg)
	speak := hearing("node-b", "node-c", "node-d")
	w.pass()
	for range 4 {
		w.lanTick(speak)
	}
	for _, n := range []string{"node-e", "node-f", "node-g"} {
		w.join(n)
		w.lanTick(speak)
	}
	for range 33 {
		w.lanTick(speak)
	}
	assert.Equal(t, w.s.desired.cfg.SlowFactor(len(w.s.live.Nodes())), 35)
	assert.DeepEqual(t, w.renewals, []string{
		"500ms create eligible=true duration=2s",
		"1s update eligible=true duration=40s",
		"18.5s update eligible=true duration=70s",
	})
}

// A renewal shows in the loop's cache only once the watch delivers it,
// which on a loaded API server takes longer than a tick. What node-a says
// of itself changes (it becomes ineligible): the change is written once,
// not again at every tick until the watch catches up.
func TestLoopLANStatusChangeWrittenOnce(t *testing.T) {
	w, _ := lanWorld(t)
	speak := hearing("node-b", "node-c", "node-d")
	w.pass()
	for range 4 {
		w.lanTick(speak)
	}
	w.watchLag = true
	n := w.nodeObj("node-a")
	n.Labels = map[string]string{policy.ExcludeLabel: ""}
	w.must(w.nodes.Update(n))
	w.s.sched.dirtyNodes = true
	for range 4 {
		w.lanTick(speak)
	}
	assert.DeepEqual(t, w.renewals, []string{
		"500ms create eligible=true duration=2s",
		"1s update eligible=true duration=20s",
		"3s update eligible=false duration=20s",
	})
}

// On slow heartbeats, a renewal may take half its own period, and one that
// failed is written again after one, two, then four renew intervals, not
// at every tick: the failures of a loaded API server do not add writes to
// its load. node-a keeps its IP meanwhile, its peers hearing it.
func TestLoopLANRenewBackoff(t *testing.T) {
	w := lanHolder(t)
	for range 8 {
		w.lanTick(hearingA(100 * time.Millisecond))
	}
	w.apiDown = true
	for range 24 {
		w.lanTick(hearingA(100 * time.Millisecond))
	}
	w.apiDown = false
	for range 2 {
		w.lanTick(hearingA(100 * time.Millisecond))
	}
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.DeepEqual(t, w.renewTries, []string{
		"500ms timeout=1s",
		"1s timeout=2.5s",
		"6s timeout=2.5s",
		"11s timeout=2.5s",   // failed
		"11.5s timeout=2.5s", // failed, one renew interval later
		"12.5s timeout=2.5s", // two
		"14.5s timeout=2.5s", // four
		"16.5s timeout=2.5s", // four
		"18.5s timeout=2.5s", // the API server is back since 18 s
	})
	assert.Assert(t, w.s.self.apiOK(w.clk.Now()))
}

// node-b holds an IP and falls silent on the LAN; its slow heartbeat is
// not due for seconds yet. node-c and node-d still speak, so node-a judges
// over the LAN, keeps its own slow heartbeat, and, the successor the lock
// names, binds the IP a lease duration after node-b's last datagram, then
// writes the lock, exactly once, without waiting for its next renewal. A datagram naming node-b from another
// address changes nothing.
func TestLoopLANTakeoverFromSilentPeer(t *testing.T) {
	w := lanPeerHolds(t)
	assert.DeepEqual(t, w.take(), []string(nil))
	others := hearing("node-c", "node-d")
	for range 3 {
		w.lanTick(others)
		w.hear("node-b", "198.18.0.99", nil)
		w.pass()
	}
	assert.DeepEqual(t, w.take(), []string(nil)) // node-b silent for 1.5 s: alive
	for range 3 {
		w.lanTick(others)
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1", "update eip-198-18-100-1 holder=node-a successor=node-d"})
	assert.DeepEqual(t, w.renewals, []string{
		"500ms create eligible=true duration=2s",
		"1s update eligible=true duration=20s",
	})
}

// lanPeerHolds is lanWorld with node-b holding testIP(0), naming node-a
// its successor, while every peer speaks.
func lanPeerHolds(t *testing.T) *world {
	w, _ := lanWorld(t)
	w.lockNaming(testIP(0), "node-b", "node-a")
	w.addService("web", testIP(0))
	w.pass()
	for range 4 {
		w.lanTick(hearing("node-b", "node-c", "node-d"))
	}
	return w
}

// lanHolder is lanWorld with node-a holding and binding testIP(0) while
// every peer hears it.
func lanHolder(t *testing.T) *world {
	t.Helper()
	w, _ := lanWorld(t)
	w.lock(testIP(0), "node-a")
	w.addService("web", testIP(0))
	w.pass()
	for range 4 {
		w.lanTick(hearingA(100 * time.Millisecond))
	}
	assert.DeepEqual(t, w.take(), []string{"bind 198.18.100.1"})
	return w
}

// A peer that still hears node-c, but whose last sign of node-a grows old,
// will judge node-a dead: node-a, no longer eligible at fence-after (¾ of
// the lease duration after that sign), hands the IP to a peer it hears,
// unbinding it just before the write, so the peer binds it without a probe.
func TestLoopLANUnheardHandsOff(t *testing.T) {
	w := lanHolder(t)
	// From now on node-a's datagrams are lost: the peers' last sign of it
	// grows by a renew interval a tick.
	for i := range 2 {
		w.lanTick(hearingA(time.Duration(i+1) * w.s.desired.cfg.RenewInterval))
	}
	assert.DeepEqual(t, w.take(), []string(nil)) // 1 s without node-a: not yet
	w.lanTick(hearingA(3 * w.s.desired.cfg.RenewInterval))
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1", "update eip-198-18-100-1 holder=node-d successor=node-c"})
	w.lanTick(hearingA(4 * w.s.desired.cfg.RenewInterval)) // the renewal that says why
	hb := w.get(lease.HeartbeatName("node-a"))
	assert.Equal(t, hb.Annotations[lease.AnnotationEligible], "false")
	assert.Assert(t, hb.Annotations[lease.AnnotationError] != "")
}

// Unheard with five IPs and two writers, node-a unbinds and hands off two
// at a time: the others stay bound until a writer is free. Heard again
// before those two writes come back, it keeps the other three. (It used
// to unbind all five at once, and they stayed dark until each write came
// back, however soon the node was heard again.)
func TestLoopLANUnheardDropsAWriterAtATime(t *testing.T) {
	w, _ := lanWorld(t)
	w.setWriters(2)
	for i := range 5 {
		w.lock(testIP(i), "node-a")
		w.addService(fmt.Sprintf("web-%d", i), testIP(i))
	}
	w.pass()
	for range 4 {
		w.lanTick(hearingA(100 * time.Millisecond))
	}
	assert.Equal(t, len(w.s.binder.bound), 5)
	r := w.s.desired.cfg.RenewInterval
	for i := range 2 {
		w.lanTick(hearingA(time.Duration(i+1) * r))
	}
	w.take()
	w.step(r)
	w.s.tick()
	for n, ages := range hearingA(3 * r) {
		w.hear(n, lanPeerIPs[n], ages)
	}
	w.s.pass()
	assert.Assert(t, w.s.self.unheard)
	assert.Equal(t, len(w.s.writes.jobs), 2, "two hand-offs in flight")
	assert.Equal(t, len(w.s.binder.bound), 3, "three IPs still bound")
	for n, ages := range hearingA(100 * time.Millisecond) {
		w.hear(n, lanPeerIPs[n], ages)
	}
	assert.Assert(t, !w.s.self.unheard)
	w.settle()
	var unbinds, handoffs int
	for _, c := range w.take() {
		switch {
		case strings.HasPrefix(c, "unbind "):
			unbinds++
		case strings.HasPrefix(c, "update ") && !strings.HasSuffix(c, "holder=node-a"):
			handoffs++
		}
	}
	assert.Equal(t, unbinds, 2)
	assert.Equal(t, handoffs, 2)
	assert.Equal(t, len(w.s.binder.bound), 3)
	assert.Equal(t, w.s.writes.dropping, 0)
}

// Of three nodes, node-b dies; node-a now hears one peer, so it goes back
// to renewing every renew interval, but its last slow renewal still holds
// for the duration it was written with. It takes the IPs it ranks first
// for the moment it judges node-b dead, between two ticks, without waiting
// for its next renewal: waiting let whichever survivor ticked first after
// the verdict take every IP, and the node started first never did.
// (node-d falls silent with node-b, so that node-a hears only node-c.)
func TestLoopLANTakeoverBetweenTicksAfterPeerLoss(t *testing.T) {
	w, _ := lanWorld(t)
	var ip netip.Addr
	for i := 0; !ip.IsValid(); i++ {
		if lease.Order(testIP(i), []string{"node-a", "node-c"})[0] == "node-a" {
			ip = testIP(i)
		}
	}
	w.lock(ip, "node-b")
	w.addService("web", ip)
	w.pass()
	all := hearing("node-b", "node-c", "node-d")
	for range 4 {
		w.lanTick(all)
	}
	// node-b's and node-d's last datagrams arrive between two ticks.
	half := w.s.desired.cfg.RenewInterval / 2
	w.step(half)
	for _, n := range []string{"node-b", "node-c", "node-d"} {
		w.hear(n, lanPeerIPs[n], all[n])
	}
	w.pass()
	w.step(half)
	w.s.tick()
	others := hearing("node-c")
	w.hear("node-c", lanPeerIPs["node-c"], others["node-c"])
	w.pass()
	for range 3 {
		w.lanTick(others)
	}
	assert.DeepEqual(t, w.take(), []string(nil)) // 1.75 s of silence: alive
	w.step(half)                                 // node-b's lease duration is up
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"update " + leaseName(ip) + " holder=node-a successor=node-c", "bind " + ip.String()})
	assert.DeepEqual(t, w.renewals, []string{
		"500ms create eligible=true duration=2s",
		"1s update eligible=true duration=20s",
	})
}

// The same silence while node-a cannot reach the API server (or while a
// stall of the whole machine makes every report late): nobody can take the
// IP over without the API server, so node-a keeps it rather than leaving
// it dark until the API server returns. A peer that can write and takes it
// over probes first, and that probe makes node-a let go.
func TestLoopLANUnheardWithoutAPIKeeps(t *testing.T) {
	w := lanHolder(t)
	w.apiDown = true
	for range 2 * idleRenewFactor { // a slow renewal fails meanwhile
		w.lanTick(hearingA(100 * time.Millisecond))
	}
	assert.Assert(t, !w.s.self.apiOK(w.clk.Now()))
	for i := range 4 {
		w.lanTick(hearingA(time.Duration(i+1) * w.s.desired.cfg.RenewInterval))
	}
	assert.Assert(t, w.s.self.unheard)
	assert.DeepEqual(t, w.take(), []string(nil))
	w.s.claim(netif.Claim{Iface: testIface, IP: testIP(0), MAC: peerMAC("node-b"), Probe: true})
	assert.DeepEqual(t, w.take(), []string{"unbind 198.18.100.1"})
}

// A rolling upgrade: node-b still runs the eipd from before datagrams
// carried a boot, a counter and a destination. Its heartbeat names no
// format; node-a takes its datagrams of the format before and sends it
// that format too, and judges it alive for as long as it speaks. Once
// node-b's heartbeat names the current format, a datagram of the format
// before from it (a replay of one from before the upgrade) counts for
// nothing, and node-b, silent, is judged dead.
func TestLoopLANMixedFormats(t *testing.T) {
	w, net := lanWorld(t)
	w.lockNaming(testIP(0), "node-b", "") // an eipd from before successors names none
	w.addService("web", testIP(0))
	oldHeartbeat := func() {
		w.lanHeartbeat("node-b")
		l := w.get(lease.HeartbeatName("node-b")).DeepCopy()
		delete(l.Annotations, lease.AnnotationLivenessFormat)
		l.ResourceVersion = w.nextRV()
		w.must(w.leases.Update(l))
	}
	oldHeartbeat()
	w.pass()
	// node-b sends the format before throughout; heard are the peers
	// whose reports have a fresh sign of it.
	heard := []string{"node-b", "node-c", "node-d"}
	speak := func() {
		w.step(w.s.desired.cfg.RenewInterval)
		w.s.tick()
		w.s.lan.speaker.speak(w.clk.Now())
		for n, ages := range hearing(heard...) {
			if n == "node-b" {
				continue
			}
			w.s.lan.speaker.receive(lanlive.Received{Source: netip.MustParseAddr(lanPeerIPs[n]), Msg: lanlive.Message{From: n, Ages: ages}})
		}
		w.s.lan.speaker.receive(lanlive.Received{Source: netip.MustParseAddr(lanPeerIPs["node-b"]), Kind: lanlive.Legacy,
			Msg: lanlive.Message{From: "node-b", Ages: hearing("node-b", "node-c", "node-d")["node-b"]}})
		w.takeDatagrams()
		w.pass()
	}
	for range 4 * int(w.s.desired.cfg.LeaseDuration/w.s.desired.cfg.RenewInterval) {
		speak()
	}
	assert.Assert(t, w.s.live.Alive("node-b", w.clk.Now()))
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.DeepEqual(t, net.legacy, map[string]bool{"node-b": true})

	w.lanHeartbeat("node-b") // upgraded: its heartbeat names the format
	heard = []string{"node-c", "node-d"}
	for range 2 * int(w.s.desired.cfg.LeaseDuration/w.s.desired.cfg.RenewInterval) {
		speak()
	}
	assert.Assert(t, !w.s.live.Alive("node-b", w.clk.Now()))
	assert.DeepEqual(t, w.take(), []string{"update eip-198-18-100-1 holder=node-a successor=node-d", "bind 198.18.100.1"})
}
