package lease

import (
	"cmp"
	"hash/fnv"
	"net/netip"
	"slices"
)

// score is the rendezvous (highest random weight) score of node for ip.
// Every node computes the same scores from the same names, so the order of
// nodes for an IP is agreed without talking. The FNV hash is finished with
// a 64-bit mixer because FNV alone scores names that differ only in their
// last character too similarly.
func score(ip netip.Addr, node string) uint64 {
	b, _ := ip.MarshalBinary()
	return scoreKey(b, node)
}

func scoreKey(key []byte, node string) uint64 {
	h := fnv.New64a()
	h.Write(key)
	h.Write([]byte{0})
	h.Write([]byte(node))
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Order returns nodes sorted by their rendezvous rank for ip, best first.
// Ties (practically impossible) break by name.
func Order(ip netip.Addr, nodes []string) []string {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(score(ip, b), score(ip, a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// Rank is the place of node among nodes for ip: 0 for the best. A node not
// in nodes gets len(nodes).
func Rank(ip netip.Addr, node string, nodes []string) int {
	s := score(ip, node)
	r := 0
	for _, n := range nodes {
		if n == node {
			continue
		}
		if t := score(ip, n); t > s || (t == s && n < node) {
			r++
		}
	}
	if !slices.Contains(nodes, node) {
		return len(nodes)
	}
	return r
}

// RankFor is Rank for any key, such as a Service UID: the place of node
// among nodes by rendezvous hash of (key, node), 0 for the best, len(nodes)
// for a node not in nodes.
func RankFor(key, node string, nodes []string) int {
	if !slices.Contains(nodes, node) {
		return len(nodes)
	}
	s := scoreKey([]byte(key), node)
	r := 0
	for _, n := range nodes {
		if t := scoreKey([]byte(key), n); n != node && (t > s || t == s && n < node) {
			r++
		}
	}
	return r
}
