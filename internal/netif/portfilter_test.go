package netif

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
)

// The node (namespace a) has its own address 198.18.0.1 and binds the
// external IP 198.18.0.10 for a Service on TCP port 80. A DNAT rule plays
// kube-proxy: 198.18.0.10:80 and every local address's port 30080 (a
// NodePort of another namespace's Service, with nodePortAddresses unset)
// go to a listener on the node's 8080, as to a host-network endpoint. The
// node has its own sockets on every address: 10250 (the kubelet) and 22.
// From the client (namespace b), with the filter: the Service answers on
// the external IP, nothing else does; the node's own address still
// reaches everything; ping and ARP still work. Without the filter, every
// port answers on the external IP.
func TestPortFilterOpensOnlyTheServicePorts(t *testing.T) {
	n := newTestNet(t)
	n.ip(t, n.a, "addr", "add", "198.18.0.1/24", "dev", vethIface)
	n.ip(t, n.a, "addr", "add", "198.18.0.10/32", "dev", vethIface)
	n.ip(t, n.b, "addr", "add", "198.18.0.2/24", "dev", vethIface)
	nftIn(t, n.a, `table ip kubeproxy {
		chain pre { type nat hook prerouting priority dstnat;
			ip daddr 198.18.0.10 tcp dport 80 dnat to 198.18.0.1:8080
			fib daddr type local tcp dport 30080 dnat to 198.18.0.1:8080
		}
	}`)
	for _, port := range []int{8080, 10250, 22} {
		listenIn(t, n, n.a, port)
	}
	reach := func(addr string) bool {
		var ok bool
		n.in(t, n.b, func() { ok = answers(addr) })
		return ok
	}
	ext, node := "198.18.0.10", "198.18.0.1"
	for _, port := range []string{"80", "10250", "22", "30080"} {
		assert.Assert(t, reach(ext+":"+port), "without the filter, %s:%s should answer", ext, port)
	}

	ip := netip.MustParseAddr(ext)
	f := NewPortFilter()
	n.in(t, n.a, func() {
		assert.NilError(t, f.Set([]netip.Addr{ip}, []Served{{Addr: ip, Proto: unix.IPPROTO_TCP, Port: 80}}))
	})
	assert.Assert(t, reach(ext+":80"), "the Service's port is filtered")
	for _, port := range []string{"10250", "22", "30080"} {
		assert.Assert(t, !reach(ext+":"+port), "%s:%s answers through the filter", ext, port)
		assert.Assert(t, reach(node+":"+port), "the node's own %s:%s is filtered", node, port)
	}
	run(t, "ip", "netns", "exec", n.b, "ping", "-c1", "-W2", ext)
	mac, _ := n.neigh(t, n.b, ext)
	assert.Equal(t, mac, n.mac(t, n.a).String(), "ARP for the external IP")

	// The Service's port changes to 10250 (a change of elements only): 80
	// closes, 10250 opens. The IP no longer managed, the filter leaves it
	// alone; removed, it lets all through again.
	n.in(t, n.a, func() {
		assert.NilError(t, f.Set([]netip.Addr{ip}, []Served{{Addr: ip, Proto: unix.IPPROTO_TCP, Port: 10250}}))
	})
	assert.Assert(t, !reach(ext+":80"), "a removed port still answers")
	assert.Assert(t, !reach(ext+":10250"), "10250 is dropped at input without a DNAT")
	n.in(t, n.a, func() { assert.NilError(t, f.Set(nil, nil)) })
	assert.Assert(t, reach(ext+":22"), "an address no longer managed is still filtered")
	n.in(t, n.a, func() { assert.NilError(t, f.Set([]netip.Addr{ip}, nil)) })
	assert.Assert(t, !reach(ext+":22"), "an address managed again is not filtered")
	n.in(t, n.a, func() { assert.NilError(t, f.Remove()) })
	assert.Assert(t, reach(ext+":10250"), "the filter outlived Remove")
	assert.Assert(t, !strings.Contains(nftIn(t, n.a, "list tables"), portFilterTable))
	n.in(t, n.a, func() { assert.NilError(t, f.Remove()) }) // none is fine
}

// IPv6 is filtered alike, and neighbour discovery still works.
func TestPortFilterIPv6(t *testing.T) {
	n := newTestNet(t)
	n.ip(t, n.a, "addr", "add", "2001:db8::1/64", "dev", vethIface, "nodad")
	n.ip(t, n.a, "addr", "add", "2001:db8::10/128", "dev", vethIface, "nodad")
	n.ip(t, n.b, "addr", "add", "2001:db8::2/64", "dev", vethIface, "nodad")
	listenIn(t, n, n.a, 80)
	listenIn(t, n, n.a, 10250)
	ip := netip.MustParseAddr("2001:db8::10")
	n.in(t, n.a, func() {
		assert.NilError(t, NewPortFilter().Set([]netip.Addr{ip}, []Served{{Addr: ip, Proto: unix.IPPROTO_TCP, Port: 80}}))
	})
	reach := func(addr string) bool {
		var ok bool
		n.in(t, n.b, func() { ok = answers(addr) })
		return ok
	}
	// No kube-proxy here: port 80 passes prerouting and, still addressed
	// to the external IP, is dropped at input like any host socket.
	assert.Assert(t, !reach("[2001:db8::10]:80"))
	assert.Assert(t, !reach("[2001:db8::10]:10250"))
	assert.Assert(t, reach("[2001:db8::1]:10250"))
	run(t, "ip", "netns", "exec", n.b, "ping", "-6", "-c1", "-W2", "2001:db8::10")
	mac, _ := n.neigh(t, n.b, "2001:db8::10")
	assert.Equal(t, mac, n.mac(t, n.a).String(), "NDP for the external IP")
}

// nftIn runs nft with script on its standard input in namespace ns.
func nftIn(t testing.TB, ns, script string) string {
	t.Helper()
	if !strings.Contains(script, "{") {
		return run(t, "ip", append([]string{"netns", "exec", ns, "nft"}, strings.Fields(script)...)...)
	}
	return run(t, "sh", "-c", fmt.Sprintf("ip netns exec %s nft -f - <<'EOF'\n%s\nEOF", ns, script))
}

// listenIn serves on every address of namespace ns, on port: each
// connection is answered "ok" and closed.
func listenIn(t testing.TB, n *testNet, ns string, port int) {
	t.Helper()
	var ln net.Listener
	n.in(t, ns, func() {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		assert.NilError(t, err)
	})
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok\n"))
			_ = c.Close()
		}
	}()
}

// answers says whether addr accepts a TCP connection and says "ok". A
// dropped SYN is retried by the kernel; two seconds hold the first retry.
func answers(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "ok\n"
}

// BenchmarkPortFilter applies the filter of 10,000 external IPs, each
// serving TCP 80 and 443, in a namespace of its own: written whole (a
// start, or the first apply after a failure), and one Service's change
// (an IP and its two ports added, then removed: two applies per op). It
// reports the table's rules and set elements as the kernel lists them,
// and the median and 99th percentile of one apply's wall time (run with
// -benchtime 50x, say, for enough applies to rank).
func BenchmarkPortFilter(b *testing.B) {
	n := newTestNet(b)
	const ips = 10000
	addrs := make([]netip.Addr, ips)
	var served []Served
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		for _, port := range []uint16{80, 443} {
			served = append(served, Served{Addr: addrs[i], Proto: unix.IPPROTO_TCP, Port: port})
		}
	}
	b.Run("whole", func(b *testing.B) {
		n.in(b, n.a, func() {
			b.ReportAllocs()
			var took []time.Duration
			for b.Loop() {
				took = append(took, timed(b, func() error { return NewPortFilter().Set(addrs, served) }))
			}
			reportQuantiles(b, took)
		})
		reportTable(b, n)
	})
	b.Run("one-service", func(b *testing.B) {
		n.in(b, n.a, func() {
			f := NewPortFilter()
			if err := f.Set(addrs, served); err != nil {
				b.Fatal(err)
			}
			extra := netip.MustParseAddr("198.19.0.1")
			more := append(slices.Clone(served), Served{Addr: extra, Proto: unix.IPPROTO_TCP, Port: 80}, Served{Addr: extra, Proto: unix.IPPROTO_TCP, Port: 443})
			moreAddrs := append(slices.Clone(addrs), extra)
			b.ReportAllocs()
			var took []time.Duration
			for b.Loop() {
				took = append(took, timed(b, func() error { return f.Set(moreAddrs, more) }), timed(b, func() error { return f.Set(addrs, served) }))
			}
			reportQuantiles(b, took)
		})
		reportTable(b, n)
	})
}

// timed is the wall time of apply, which must succeed.
func timed(b *testing.B, apply func() error) time.Duration {
	start := time.Now()
	if err := apply(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// reportQuantiles reports the median and the 99th percentile (nearest
// rank) of took, in milliseconds, and how many there are.
func reportQuantiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	rank := func(p float64) time.Duration { return took[max(0, int(math.Ceil(p*float64(len(took))))-1)] }
	b.ReportMetric(float64(rank(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(rank(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(took)), "applies")
}

// reportTable reports the rules and set elements of the filter's table.
func reportTable(b *testing.B, n *testNet) {
	var table struct {
		Nftables []struct {
			Rule *struct{}
			Set  *struct{ Elem []any }
		}
	}
	assert.NilError(b, json.Unmarshal([]byte(nftIn(b, n.a, "-j list table inet "+portFilterTable)), &table))
	var rules, elements int
	for _, o := range table.Nftables {
		if o.Rule != nil {
			rules++
		}
		if o.Set != nil {
			elements += len(o.Set.Elem)
		}
	}
	b.ReportMetric(float64(rules), "rules")
	b.ReportMetric(float64(elements), "elements")
}
