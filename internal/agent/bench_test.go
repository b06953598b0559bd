package agent

import (
	"fmt"
	"testing"
)

// steadyWorld is node-00's loop in a settled cluster of nodes nodes that
// hold ips IPs round robin, every node renewing.
func steadyWorld(b *testing.B, ips, nodes int) (*world, []string) {
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

// BenchmarkReconcile is one owner-loop pass over 10,000 IPs held by 50
// nodes at steady state: what every tick cost before passes ran only when
// an input needed one.
func BenchmarkReconcile(b *testing.B) {
	w, _ := steadyWorld(b, 10000, 50)
	b.ReportAllocs()
	for b.Loop() {
		w.s.reconcile()
	}
	if calls := w.take(); len(calls) > 0 {
		b.Fatalf("a steady pass acted: %v", calls[:min(len(calls), 5)])
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
		if w.s.heartbeatsRenewed() {
			b.Fatal("a renewal asked for a pass")
		}
	}
}
