package netif

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

func TestRefreshOnVeth(t *testing.T) {
	n := newTestNet(t)
	n.in(t, n.a, func() {
		a := NewAddresses(testLogger(t))
		defer a.Close()
		bound := bindMany(t, a, 600, time.Second) // more than two batches
		v6 := Bound{Iface: vethIface, Prefix: netip.MustParsePrefix("2001:db8::5/64")}
		assert.NilError(t, a.Add(vethIface, v6.Prefix, time.Second))
		bound = append(bound, v6)

		assert.NilError(t, a.Refresh(bound, 30*time.Second))
		shown := n.addrs(t, n.a, vethIface)
		lifetimes := map[string]shownAddr{}
		for _, s := range shown {
			lifetimes[s.Local] = s
		}
		for _, b := range bound {
			s, ok := lifetimes[b.Prefix.Addr().String()]
			assert.Assert(t, ok, "%s missing", b.Prefix)
			assert.Equal(t, s.PrefixLen, b.Prefix.Bits(), b.Prefix)
			// Renewed from 1 s: more than 1 s left means the refresh took.
			assert.Assert(t, s.ValidLft > 1 && s.ValidLft <= 30 && s.PrefLft > 1, "%s: %+v", b.Prefix, s)
		}

		// One address on an interface that is gone: the others are
		// renewed, the error names it.
		gone := Bound{Iface: "nosuch0", Prefix: netip.MustParsePrefix("198.18.9.9/32")}
		err := a.Refresh([]Bound{bound[0], gone, bound[1]}, 20*time.Second)
		assert.ErrorContains(t, err, "refresh 198.18.9.9/32 on nosuch0")
		assert.Equal(t, n.addr(t, n.a, vethIface, "198.18.0.2")[0].ValidLft <= 20, true)

		// An interface deleted since it was looked up: the kernel refuses
		// its address, the error names it, and the socket stays usable.
		n.ip(t, n.a, "link", "add", "dummy9", "type", "veth", "peer", "name", "dummy9p")
		deleted := Bound{Iface: "dummy9", Prefix: netip.MustParsePrefix("198.18.9.10/32")}
		assert.NilError(t, a.Add(deleted.Iface, deleted.Prefix, time.Second))
		n.ip(t, n.a, "link", "del", "dummy9")
		err = a.Refresh([]Bound{deleted, bound[2]}, 10*time.Second)
		assert.ErrorContains(t, err, "refresh 198.18.9.10/32 on dummy9: no such device")
		assert.Equal(t, n.addr(t, n.a, vethIface, "198.18.0.3")[0].ValidLft <= 10, true)
	})
}

// BenchmarkRefresh compares renewing 5,000 lifetimes with one request per
// address (Add) and in batches (Refresh).
func BenchmarkRefresh(b *testing.B) {
	n := newTestNet(b)
	n.in(b, n.a, func() {
		a := NewAddresses(testLogger(b))
		defer a.Close()
		bound := bindMany(b, a, 5000, 10*time.Second)
		b.Run("add-each", func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				for _, x := range bound {
					assert.NilError(b, a.Add(x.Iface, x.Prefix, 10*time.Second))
				}
			}
		})
		b.Run("batched", func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				assert.NilError(b, a.Refresh(bound, 10*time.Second))
			}
		})
	})
}

// reportCPU reports the process's user and system CPU per operation, from
// now until the returned function runs.
func reportCPU(b *testing.B) func() {
	var before syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	return func() {
		var after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		n := float64(b.N)
		b.ReportMetric(float64(after.Utime.Nano()-before.Utime.Nano())/n/1e6, "user-ms/op")
		b.ReportMetric(float64(after.Stime.Nano()-before.Stime.Nano())/n/1e6, "sys-ms/op")
	}
}

// bindMany binds n addresses of 198.18.0.0/16 on vethIface with Add.
func bindMany(t testing.TB, a *Addresses, n int, lifetime time.Duration) []Bound {
	t.Helper()
	var bound []Bound
	for i := range n {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(1 + i%250)}), 16)
		bound = append(bound, Bound{Iface: vethIface, Prefix: p})
		assert.NilError(t, a.Add(vethIface, p, lifetime))
	}
	return bound
}
