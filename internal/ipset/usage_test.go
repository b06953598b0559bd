package ipset_test

import (
	"net/netip"
	"slices"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
)

// counts is a Usage without its Range pointer, for comparing.
type counts struct {
	Label                                      string
	Capacity, Reserved, Allocated, Bound, Free uint64
}

func TestRangeUsage(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": ranges + "2001:db8:1::/104 name=huge\n"})
	reserved := map[netip.Addr]string{
		netip.MustParseAddr("198.18.0.5"):  config.NodeAddress("node-1"),
		netip.MustParseAddr("198.18.0.0"):  config.NodeAddress("node-2"), // the network address: counted once
		netip.MustParseAddr("198.18.2.15"): "the API server's address",
		netip.MustParseAddr("198.18.9.9"):  config.NodeAddress("node-3"), // in no range
	}
	entries, _ := compute([]*corev1.Service{
		service("a/web", externalIPs("198.18.0.1", "198.18.0.2", "198.18.0.5")), // .5 is refused: a node's
		service("a/api", externalIPs("198.18.2.10", "2001:db8::1")),
		service("a/out", externalIPs("198.18.7.1")),
	}, cfg, reserved)
	bound := func(ip netip.Addr) bool {
		return ip == netip.MustParseAddr("198.18.0.2") || ip == netip.MustParseAddr("2001:db8::1")
	}

	var got []counts
	for _, u := range ipset.RangeUsage(cfg, slices.Values(entries), reserved, bound) {
		assert.Equal(t, u.Capacity, u.Reserved+u.Allocated+u.Free, "range %s", u.Range.Label())
		got = append(got, counts{u.Range.Label(), u.Capacity, u.Reserved, u.Allocated, u.Bound, u.Free})
	}
	assert.DeepEqual(t, got, []counts{
		{"lan", 256, 3, 2, 1, 251}, // network, broadcast, node-1
		{"198.18.1.0/31", 2, 0, 0, 0, 2},
		{"198.18.2.10-198.18.2.20", 11, 1, 1, 0, 9},
		{"v6", 256, 0, 1, 1, 255},
		{"huge", 1 << 24, 0, 0, 0, 1 << 24},
	})
}

func TestRangeUsed(t *testing.T) {
	for _, tc := range []struct {
		u    ipset.Usage
		want float64
	}{
		{ipset.Usage{Capacity: 256, Reserved: 2, Allocated: 127}, 0.5},
		{ipset.Usage{Capacity: 10, Allocated: 9}, 0.9},
		{ipset.Usage{Capacity: 1, Reserved: 1}, 1}, // nothing usable: full
	} {
		assert.Equal(t, tc.u.Used(), tc.want)
	}
}

func TestRangeSize(t *testing.T) {
	for text, want := range map[string]uint64{
		"198.18.0.0/24":                256,
		"198.18.0.7":                   1,
		"198.18.0.250-198.18.1.4":      11,
		"2001:db8::/120":               256,
		"2001:db8::ffff-2001:db8::1:1": 3,
		"2001:db8::/104":               1 << 24, // the largest range config accepts
	} {
		cfg := mustParse(t, map[string]string{"ranges": text})
		assert.Equal(t, cfg.Ranges[0].Size(), want, text)
	}
}
