package agent

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
)

// fleet is n speakers on a fake LAN that carries a datagram in a step,
// each with the liveness tracker its loop would feed, on one fake clock.
// Nothing else of the agent runs: it checks the fan-out's promises at a
// size the harness's one-node world cannot reach.
type fleet struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	tm    lanTimings
	fence time.Duration
	nodes []*fleetNode
	byAP  map[netip.AddrPort]*fleetNode
	// queue holds the datagrams sent during the current step, delivered
	// at the next.
	queue []fleetDatagram
	sent  int
}

type fleetNode struct {
	name  string
	sess  *lanlive.Session // its eipd's freshness of datagrams
	ap    netip.AddrPort
	sp    *speaker
	watch *watchdog
	live  *lease.Liveness
	next  time.Time // its next tick
	dead  bool
}

type fleetDatagram struct {
	to  *fleetNode
	msg []byte
	src netip.Addr
}

// fleetConn is one node's socket on the fake LAN: it seals what it sends
// as lanlive.Conn does, and the fleet admits it at the other end as
// lanlive.Conn would.
type fleetConn struct {
	f    *fleet
	from *fleetNode
}

func (c fleetConn) Send(to []lanlive.Peer, m lanlive.Message) error {
	for _, p := range to {
		b := lanlive.Encode(c.from.sess.Seal(p.Node, m))
		c.f.queue = append(c.f.queue, fleetDatagram{to: c.f.byAP[p.Addr], msg: b, src: c.from.ap.Addr()})
		c.f.sent++
	}
	return nil
}

func (c fleetConn) Close() error { return nil }

// fleetStep is the fake LAN's delivery time and how often the speakers'
// timers are looked at.
const fleetStep = 5 * time.Millisecond

func newFleet(t *testing.T, n int) *fleet {
	r, d := 500*time.Millisecond, 2*time.Second
	f := &fleet{t: t, clk: clocktesting.NewFakeClock(t0), fence: d / 4 * 3, byAP: map[netip.AddrPort]*fleetNode{}}
	f.tm = lanTimings{renew: r, suspect: lease.SuspectAfter(d, f.fence, r), duration: d}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	peers := map[string]lanlive.Peer{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("node-%02d", i)
		names = append(names, name)
		peers[name] = lanlive.Peer{Node: name, Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i / 200), byte(1 + i%200)}), 9403)}
	}
	phases := rand.New(rand.NewPCG(1, 2)).Perm(n)
	for i, name := range names {
		nd := &fleetNode{name: name, ap: peers[name].Addr, sess: lanlive.NewSession(name, uint64(1+i), func(string, netip.Addr) bool { return true }), watch: newWatchdog(f.clk, func(time.Duration) {})}
		nd.sp = newSpeaker(name, f.clk, log, nd.watch)
		nd.sp.configure(fleetConn{f: f, from: nd}, f.tm)
		others := map[string]lanlive.Peer{}
		for _, p := range names {
			if p != name {
				others[p] = peers[p]
			}
		}
		nd.sp.setPeers(others, names)
		// Ticks spread over the renew interval in no order of names, as
		// nodes started apart; each starts sending at its first.
		nd.next = t0.Add(r * time.Duration(phases[i]) / time.Duration(n))
		nd.live = lease.NewLiveness(name, r, 2*r)
		nd.live.SetLAN(d, 2*r, 4*r, f.tm.suspect)
		nd.live.Sending(nd.next)
		for _, p := range names {
			nd.live.Observe(lease.Heartbeat{Node: p, Version: "1", Duration: 10 * d, LivenessPort: 9403}, t0)
		}
		f.nodes = append(f.nodes, nd)
		f.byAP[nd.ap] = nd
	}
	return f
}

// run steps the fleet for d, calling check after every step.
func (f *fleet) run(d time.Duration, check func(now time.Time)) {
	for end := f.clk.Now().Add(d); f.clk.Now().Before(end); {
		f.clk.Step(fleetStep)
		now := f.clk.Now()
		q := f.queue
		f.queue = nil
		for _, dg := range q {
			if dg.to.dead {
				continue
			}
			d, err := lanlive.Decode(dg.msg)
			assert.NilError(f.t, err)
			if kind, drop := dg.to.sess.Admit(lanlive.Arrival{Datagram: d, Source: dg.src, At: now, Key: 1}); drop == lanlive.Kept {
				dg.to.sp.receive(lanlive.Received{Source: dg.src, Msg: d.Message, Kind: kind})
			}
		}
		for _, nd := range f.nodes {
			if nd.dead {
				continue
			}
			if !now.Before(nd.next) {
				nd.watch.progressed(now)
				nd.sp.speak(now)
				nd.next = nd.next.Add(f.tm.renew)
			}
			nd.sp.ask(now)
			for _, h := range nd.sp.take() {
				nd.live.Datagram(h.node, h.ages, h.at)
			}
		}
		check(now)
	}
}

// Fifty nodes: every node judges every other alive and none is unheard,
// with about six datagrams per node and renew interval. One dies: every
// survivor judges it dead a lease duration after its last datagram, no
// sooner than suspect before that, while nobody else is judged dead or
// unheard.
func TestFleetOfFiftyFansOut(t *testing.T) {
	f := newFleet(t, 50)
	healthy := func(now time.Time) {
		for _, nd := range f.nodes {
			if nd.dead {
				continue
			}
			un, _ := nd.live.Unheard(now, f.fence)
			assert.Assert(t, !un, "%s unheard at %s", nd.name, now.Sub(t0))
			// Every verdict, every tenth of a second.
			if now.Sub(t0)%(100*time.Millisecond) != 0 {
				continue
			}
			for _, p := range f.nodes {
				if !p.dead && now.Sub(t0) > f.tm.duration {
					assert.Assert(t, nd.live.Alive(p.name, now), "%s judges %s dead at %s", nd.name, p.name, now.Sub(t0))
				}
			}
		}
	}
	f.run(5*time.Second, healthy)
	f.sent = 0
	f.run(10*time.Second, healthy)
	perNode := float64(f.sent) / 50 / 20 // datagrams sent per node and renew interval
	assert.Assert(t, perNode < 8, "%.1f datagrams per node and renew interval", perNode)
	t.Logf("%.2f datagrams per node and renew interval", perNode)

	victim := f.nodes[17]
	victim.dead = true
	died := f.clk.Now()
	judged := map[string]time.Time{}
	f.run(2*f.tm.duration, func(now time.Time) {
		healthy(now)
		for _, nd := range f.nodes {
			if _, ok := judged[nd.name]; !ok && !nd.dead && !nd.live.Alive(victim.name, now) {
				judged[nd.name] = now
			}
		}
	})
	assert.Equal(t, len(judged), 49)
	var latest time.Duration
	for n, at := range judged {
		after := at.Sub(died)
		assert.Assert(t, after >= f.tm.duration-f.tm.suspect && after <= f.tm.duration+fleetStep, "%s judged node-17 dead %s after it died", n, after)
		latest = max(latest, after)
	}
	t.Logf("judged dead %s after it died, at the latest", latest)
}
