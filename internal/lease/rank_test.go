package lease_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

func nodeNames(k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i+1)
	}
	return out
}

func randomIP(rng *rand.Rand) netip.Addr {
	if rng.IntN(4) == 0 {
		var b [16]byte
		b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
		for i := 12; i < 16; i++ {
			b[i] = byte(rng.Uint32())
		}
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte{198, 18 + byte(rng.IntN(2)), byte(rng.Uint32()), byte(rng.Uint32())})
}

func TestOrderAndRankAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		ip := randomIP(rng)
		nodes := nodeNames(1 + rng.IntN(12))
		order := lease.Order(ip, nodes)
		assert.Equal(t, len(order), len(nodes))
		for i, n := range order {
			assert.Equal(t, lease.Rank(ip, n, nodes), i, "ip %s node %s", ip, n)
		}
		assert.Equal(t, lease.Rank(ip, "absent", nodes), len(nodes))
	}
}

func TestOrderDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nodes := nodeNames(9)
	for range 100 {
		ip := randomIP(rng)
		want := lease.Order(ip, nodes)
		shuffled := slices.Clone(nodes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		assert.DeepEqual(t, lease.Order(ip, shuffled), want)
		assert.DeepEqual(t, nodes, nodeNames(9)) // Order must not change its input
	}
}

// Each of k nodes must be first for about 1/k of the IPs, even with names
// that differ only in their last character. The seed is fixed, so the
// tolerance (4.5 standard deviations of a fair binomial) cannot flake.
func TestRankSpreads(t *testing.T) {
	const ips = 1000
	rng := rand.New(rand.NewPCG(5, 6))
	for k := 3; k <= 10; k++ {
		nodes := nodeNames(k)
		first := map[string]int{}
		for range ips {
			first[lease.Order(randomIP(rng), nodes)[0]]++
		}
		p := 1 / float64(k)
		want := ips * p
		tol := 4.5 * math.Sqrt(ips*p*(1-p))
		for _, n := range nodes {
			got := float64(first[n])
			assert.Assert(t, math.Abs(got-want) <= tol, "k=%d: %s is first for %v IPs, want %.0f±%.0f", k, n, got, want, tol)
		}
	}
}

// Rendezvous hashing: removing a node leaves the others in the same order,
// so a node's death moves only its own IPs.
func TestOrderStableWhenNodeLeaves(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		ip := randomIP(rng)
		nodes := nodeNames(2 + rng.IntN(10))
		gone := nodes[rng.IntN(len(nodes))]
		full := lease.Order(ip, nodes)
		rest := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == gone })
		want := slices.DeleteFunc(slices.Clone(full), func(n string) bool { return n == gone })
		assert.DeepEqual(t, lease.Order(ip, rest), want)
	}
}

func TestOrderDependsOnIP(t *testing.T) {
	nodes := nodeNames(5)
	a := lease.Order(netip.MustParseAddr("198.18.0.1"), nodes)
	differs := false
	for i := 2; i < 20 && !differs; i++ {
		differs = !slices.Equal(lease.Order(netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}), nodes), a)
	}
	assert.Assert(t, differs, "every IP ranks nodes the same way")
}

func TestRankForSpreadsKeys(t *testing.T) {
	nodes := []string{"node-1", "node-2", "node-3"}
	first := map[string]int{}
	for i := range 300 {
		key := fmt.Sprintf("5f1c0b2e-%04d", i)
		ranks := map[int]bool{}
		for _, n := range nodes {
			r := lease.RankFor(key, n, nodes)
			ranks[r] = true
			if r == 0 {
				first[n]++
			}
		}
		assert.Equal(t, len(ranks), len(nodes), "every node has its own rank for %s", key)
	}
	for _, n := range nodes {
		assert.Assert(t, first[n] > 60, "%s is first for %d of 300 keys", n, first[n])
	}
	assert.Equal(t, lease.RankFor("k", "node-9", nodes), len(nodes))
}
