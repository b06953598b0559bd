package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
)

// steadyWorld is node-00's loop in a settled cluster of nodes nodes that
// hold ips IPs round robin, every node renewing.
func steadyWorld(b testing.TB, ips, nodes int) (*world, []string) {
	w := newWorld(b, "node-00", map[string]string{"ranges": "198.18.96.0/19\n198.18.128.0/18", "iface": testIface})
	peers := make([]string, 0, nodes-1)
	for i := 1; i < nodes; i++ {
		n := fmt.Sprintf("node-%02d", i)
		peers = append(peers, n)
		w.addNode(n)
		w.heartbeat(n, true)
	}
	for i := range ips {
		w.lock(testIP(i), fmt.Sprintf("node-%02d", i%nodes))
		w.addService(fmt.Sprintf("svc-%d", i), testIP(i))
	}
	w.pass()
	for range 8 {
		w.tick(peers...)
	}
	if got, want := len(w.addrs), (ips+nodes-1)/nodes; got != want {
		b.Fatalf("node-00 bound %d IPs, want %d", got, want)
	}
	w.take()
	return w, peers
}

// BenchmarkReconcile is one owner-loop pass over 10,000 IPs held by 3 or
// 50 nodes at steady state: what every tick cost before passes ran only
// when an input needed one, and what the full pass of every resync period
// costs still (its garbage is most of what the collector finds then).
func BenchmarkReconcile(b *testing.B) {
	for _, nodes := range []int{3, 50} {
		b.Run(fmt.Sprintf("10000-IPs/%d-nodes", nodes), func(b *testing.B) {
			w, _ := steadyWorld(b, 10000, nodes)
			b.ReportAllocs()
			for b.Loop() {
				w.s.reconcile()
			}
			if calls := w.take(); len(calls) > 0 {
				b.Fatalf("a steady pass acted: %v", calls[:min(len(calls), 5)])
			}
		})
	}
}

// BenchmarkPassAmongWaiting is a pass over the one IP whose time came
// while 3,500 others wait on theirs, as in a mass failover's binds, where
// the loop passes every quarter renew interval.
func BenchmarkPassAmongWaiting(b *testing.B) {
	w, _ := steadyWorld(b, 10000, 3)
	now := w.clk.Now()
	for i := range 3500 {
		w.s.sched.wakeIP(testIP(i), now.Add(time.Hour))
	}
	b.ReportAllocs()
	for b.Loop() {
		w.s.sched.wakeIP(testIP(9999), now)
		w.s.reconcileSome(now)
	}
	if calls := w.take(); len(calls) > 0 {
		b.Fatalf("a steady pass acted: %v", calls[:min(len(calls), 5)])
	}
}

// BenchmarkSuccessorBindsInSlices is the loop's work for a successor
// taking over 1,750 IPs (a survivor's share of the 10,000-IP failover),
// each probe and bind taking 250 µs of the loop's clock, so that a slice
// of a quarter renew interval binds about 500 of them.
func BenchmarkSuccessorBindsInSlices(b *testing.B) {
	var ips []netip.Addr
	for i := range 1750 {
		ips = append(ips, testIP(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		w := takingOverAll(b, ips...)
		w.sendTakes = 250 * time.Microsecond
		b.StartTimer()
		for len(w.addrs) < len(ips) {
			if w.clk.Now().Sub(w.s.self.lastTick) >= w.s.desired.cfg.RenewInterval {
				w.s.tick()
			}
			w.s.pass()
			w.settle()
			w.step(time.Millisecond)
		}
	}
}

// BenchmarkColdStartHeap is what node-00's heap holds after a cold start
// of 10,000 IPs on 3 nodes and the full pass of a resync period after it
// (heap-B, after a collection, the harness's own objects included): what
// the collector marks at every cycle of the steady state, and what the
// memory limit must leave room above. Each peer takes the IPs it ranks
// first for as node-00 starts racing; node-00 takes the others.
func BenchmarkColdStartHeap(b *testing.B) {
	peers := []string{"node-01", "node-02"}
	all := append([]string{"node-00"}, peers...)
	for b.Loop() {
		w := newWorld(b, "node-00", map[string]string{"ranges": "198.18.96.0/19\n198.18.128.0/18", "iface": testIface})
		for _, n := range peers {
			w.addNode(n)
			w.heartbeat(n, true)
		}
		mine := 0
		for i := range 10000 {
			w.addService(fmt.Sprintf("svc-%d", i), testIP(i))
			if lease.Rank(testIP(i), "node-00", all) == 0 {
				mine++
			}
		}
		for round := range 12 {
			w.step(w.s.desired.cfg.RenewInterval)
			w.s.tick()
			for _, n := range peers {
				w.heartbeat(n, true)
			}
			if round == 3 {
				for i := range 10000 {
					for _, n := range peers {
						if lease.Rank(testIP(i), n, all) == 0 {
							w.lock(testIP(i), n)
						}
					}
				}
			}
			w.s.reconcile()
			for w.renew() || len(w.s.writes.jobs) > 0 {
				for len(w.s.writes.jobs) > 0 {
					w.s.writeDone(w.answer(<-w.s.writes.jobs))
				}
				w.s.pass()
			}
		}
		if len(w.addrs) != mine {
			b.Fatalf("node-00 bound %d IPs, want the %d it ranks first for", len(w.addrs), mine)
		}
		w.step(w.a.opt.Resync)
		w.s.tick()
		w.s.reconcile()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapAlloc), "heap-B")
		runtime.KeepAlive(w)
	}
}

// BenchmarkHeartbeatRenewed is the work of one peer's renewal (of 50
// nodes', 100 a second at the defaults) with 10,000 locks in the cache.
func BenchmarkHeartbeatRenewed(b *testing.B) {
	w, peers := steadyWorld(b, 10000, 50)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.heartbeat(peers[i%len(peers)], true)
		i++
		if w.heartbeatsRenewed() {
			b.Fatal("a renewal asked for a pass")
		}
	}
}

// BenchmarkSteadySecond is one second of a settled node's loop: two renew
// ticks and their renewals, and every peer's two renewals, each answered
// as the loop answers it. Its ns/op over 1e9 is the share of a core the
// loop needs (the kernel's side of refreshing address lifetimes aside).
// "every-input" runs a pass for each tick and renewal result, as the loop
// did before passDue.
func BenchmarkSteadySecond(b *testing.B) {
	for _, nodes := range []int{3, 50} {
		for _, mode := range []string{"every-input", "passDue"} {
			b.Run(fmt.Sprintf("10000-IPs/%d-nodes/%s", nodes, mode), func(b *testing.B) {
				w, peers := steadyWorld(b, 10000, nodes)
				due := func() bool { return mode == "every-input" || w.passDue() }
				b.ReportAllocs()
				for b.Loop() {
					for range 2 {
						w.step(w.s.desired.cfg.RenewInterval)
						w.s.tick()
						if due() {
							w.s.reconcile()
						}
						req := <-w.s.hbLine.req
						sent := w.clk.Now()
						err := w.s.hb.renew(req)
						if w.heartbeatsRenewed() {
							w.s.reconcile()
						}
						w.s.self.renewed(renewResult{renewal: req, sent: sent, err: err}, w.s.clk.Now(), w.s.desired.cfg.RenewInterval)
						if due() {
							w.s.reconcile()
						}
						for _, p := range peers {
							w.heartbeat(p, true)
							if w.heartbeatsRenewed() {
								w.s.reconcile()
							}
						}
					}
				}
				if calls := w.take(); len(calls) > 0 {
					b.Fatalf("a steady second acted: %v", calls[:min(len(calls), 5)])
				}
			})
		}
	}
}

// BenchmarkWriteResult is what one write result costs node-00's loop in a
// cold start of 10,000 IPs on 3 nodes, every acquisition slot taken (the
// window opened to all the writers): the result, then the pass that
// answers it. The write lost a race to a lock the cache does not show yet,
// so its IP is raced for again, the window stays open, and every iteration
// finds the loop in the same state.
// "full" passes over every IP, as the loop did for every batch of results
// before the incremental pass.
func BenchmarkWriteResult(b *testing.B) {
	for _, mode := range []string{"full", "incremental"} {
		b.Run("10000-IPs/3-nodes/"+mode, func(b *testing.B) {
			w := newWorld(b, "node-00", map[string]string{"ranges": "198.18.96.0/19\n198.18.128.0/18", "iface": testIface})
			for _, n := range []string{"node-01", "node-02"} {
				w.addNode(n)
				w.heartbeat(n, true)
			}
			for i := range 10000 {
				w.addService(fmt.Sprintf("svc-%d", i), testIP(i))
			}
			w.s.reconcile()
			w.s.writes.window, w.s.writes.idleSince = float64(w.a.opt.Writers), w.clk.Now()
			for range 3 { // until this node knows its peers and races
				w.step(w.s.desired.cfg.RenewInterval)
				w.s.tick()
				for _, n := range []string{"node-01", "node-02"} {
					w.heartbeat(n, true)
				}
				w.renew()
				w.s.reconcile()
			}
			if len(w.s.writes.jobs) != w.a.opt.Writers {
				b.Fatalf("%d acquisitions in flight, want %d", len(w.s.writes.jobs), w.a.opt.Writers)
			}
			b.ReportAllocs()
			for b.Loop() {
				j := <-w.s.writes.jobs
				w.s.writeDone(writeResult{write: j, err: apierrors.NewConflict(leaseResource, j.name, errors.New("raced"))})
				if mode == "full" {
					w.s.reconcile()
				} else {
					w.s.pass()
				}
				if len(w.s.writes.jobs) != w.a.opt.Writers {
					b.Fatalf("%d acquisitions in flight, want %d", len(w.s.writes.jobs), w.a.opt.Writers)
				}
			}
		})
	}
}

// BenchmarkLANSteadySecond is one second of node-00's loop and speaker
// among 50 nodes with liveness over the LAN, at steady state with 1,000
// IPs: two ticks, each with this node's datagram and the fourteen or so
// it hears a second (each naming every node), and the four heartbeat
// renewals of the whole cluster (heartbeat-writes) coming through the
// watch. What eipd's own logic costs at fifty nodes, without the runtime,
// the informers and the kernel: 1.3 ms a second on the test bed, against
// the 3.5 % of a core an eipd took there (docs/benchmarks.md).
func BenchmarkLANSteadySecond(b *testing.B) {
	const nodes, ips = 50, 1000
	w := newWorld(b, "node-00", map[string]string{"ranges": "198.18.96.0/19\n198.18.128.0/18", "iface": testIface})
	w.s.lan.listen = func(uint16, lanlive.SentBy, chan<- lanlive.Received) (LANConn, error) { return &lanNet{}, nil }
	w.s.configureLAN()
	peers := make([]string, 0, nodes-1)
	addr := func(i int) string { return fmt.Sprintf("198.18.1.%d", 10+i) }
	for i := range nodes {
		n := fmt.Sprintf("node-%02d", i)
		if i > 0 {
			peers = append(peers, n)
			w.addNode(n)
		}
		node := w.nodeObj(n)
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr(i)}}
		w.must(w.nodes.Update(node))
		if i > 0 {
			w.lanHeartbeat(n)
		}
	}
	for i := range ips {
		w.lock(testIP(i), fmt.Sprintf("node-%02d", i%nodes))
		w.addService(fmt.Sprintf("svc-%d", i), testIP(i))
	}
	w.pass()
	ages := map[string]time.Duration{}
	for i := range nodes {
		ages[fmt.Sprintf("node-%02d", i)] = 200 * time.Millisecond
	}
	// half is half a second as the loop runs it (state.run): a pass only
	// when an input asks for one.
	half := func(k int) {
		w.step(w.s.desired.cfg.RenewInterval)
		w.s.tick()
		if w.renew() || w.passDue() {
			w.s.pass()
		}
		w.s.lan.speaker.speak(w.clk.Now())
		for j := range 7 {
			p := peers[(7*k+j)%len(peers)]
			w.arrive(p, addr((7*k+j)%len(peers)+1), ages)
			if w.takeDatagrams() {
				w.s.pass()
			}
		}
		for j := range 2 {
			w.lanHeartbeat(peers[(2*k+j)%len(peers)])
			if w.heartbeatsRenewed() {
				w.s.sched.needFull = true
				w.s.pass()
			}
		}
	}
	w.pass()
	for k := range 40 {
		half(k)
	}
	w.pass()
	if len(w.addrs) != ips/nodes {
		b.Fatalf("node-00 bound %d IPs, want %d", len(w.addrs), ips/nodes)
	}
	w.take()
	b.ReportAllocs()
	k := 40
	for b.Loop() {
		half(k)
		half(k + 1)
		k += 2
	}
	if calls := w.take(); len(calls) > 0 {
		b.Fatalf("a steady second acted: %v", calls[:min(len(calls), 5)])
	}
}

// BenchmarkResync is the agent's side of one resync of a settled node at
// 10,000 IPs on 3 nodes (the fake netif lists in no time): what runs every
// resync period besides the full pass.
func BenchmarkResync(b *testing.B) {
	w, _ := steadyWorld(b, 10000, 3)
	b.ReportAllocs()
	for b.Loop() {
		w.s.resync(false)
	}
	if calls := w.take(); len(calls) > 0 {
		b.Fatalf("a steady resync acted: %v", calls[:min(len(calls), 5)])
	}
}
