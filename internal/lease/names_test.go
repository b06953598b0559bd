package lease_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"gotest.tools/v3/assert"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/eip-project/eip/internal/lease"
)

func TestNameFor(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"10.0.0.5", "eip-10-0-0-5"},
		{"198.18.255.1", "eip-198-18-255-1"},
		{"2001:db8::5", "eip-2001-db8--5"},
		{"2001:DB8:0:0:0:0:0:5", "eip-2001-db8--5"},
		{"2001:db8:1:2:3:4:5:6", "eip-2001-db8-1-2-3-4-5-6"},
		{"::ffff:10.0.0.5", "eip-10-0-0-5"},
		// A trailing "::" would end the name in '-', which Kubernetes refuses.
		{"2001:db8:1::", "eip-2001-db8-1--0"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			assert.Equal(t, lease.NameFor(netip.MustParseAddr(tc.ip)), tc.want)
		})
	}
}

// Every lock name must be a valid Lease name, and distinct addresses must
// never share one.
func TestNameForValidAndUnique(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	seen := map[string]netip.Addr{}
	check := func(ip netip.Addr) {
		name := lease.NameFor(ip)
		assert.Assert(t, len(validation.IsDNS1123Subdomain(name)) == 0, "%s -> %q: %v", ip, name, validation.IsDNS1123Subdomain(name))
		if prev, ok := seen[name]; ok {
			assert.Equal(t, prev, ip, "two addresses share the name %s", name)
		}
		seen[name] = ip
	}
	for range 5000 {
		var b16 [16]byte
		for i := range b16 {
			// Mostly zero bytes, so that "::" compression appears in every position.
			if rng.IntN(3) == 0 {
				b16[i] = byte(rng.Uint32())
			}
		}
		check(netip.AddrFrom16(b16))
		check(netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}))
	}
	check(netip.MustParseAddr("2001:db8::"))
	check(netip.MustParseAddr("2001:db8::1"))
	check(netip.MustParseAddr("2001:db8::1:0"))
}

func TestHeartbeatNameRoundTrip(t *testing.T) {
	for _, node := range []string{"node-a", "worker-1.example.com", "eip-node-x"} {
		name := lease.HeartbeatName(node)
		got, ok := lease.NodeOf(name)
		assert.Assert(t, ok, name)
		assert.Equal(t, got, node)
	}
	assert.Equal(t, lease.HeartbeatName("n1"), "eip-node-n1")

	for _, name := range []string{"eip-node-", "eip-10-0-0-5", "eip-2001-db8--5", "node-a", ""} {
		_, ok := lease.NodeOf(name)
		assert.Assert(t, !ok, name)
	}
}

// The agent names every IP several times per reconcile pass.
func BenchmarkNameFor(b *testing.B) {
	ips := []netip.Addr{netip.MustParseAddr("198.18.100.7"), netip.MustParseAddr("2001:db8::100:7")}
	for i := 0; b.Loop(); i++ {
		_ = lease.NameFor(ips[i%2])
	}
}
