package ipset

import (
	"iter"
	"net/netip"

	"github.com/eip-project/eip/internal/config"
)

// Usage is how the addresses of one range are used. Reserved and Allocated
// never overlap (an address eip never binds is no Entry), so
// Capacity = Reserved + Allocated + Free.
type Usage struct {
	// Range points into the Config given to RangeUsage.
	Range *config.Range
	// Capacity is how many addresses the range holds (Range.Size).
	Capacity uint64
	// Reserved are the range's addresses eip never binds: the network and
	// broadcast addresses of an IPv4 CIDR, and the nodes' and the API
	// server's own addresses.
	Reserved uint64
	// Allocated are the range's addresses that a Service names and eip
	// serves (an Entry); Bound those of them that bound reports bound.
	Allocated, Bound uint64
	// Free are the addresses left for new Services.
	Free uint64
}

// Used is the fraction of the range's usable addresses (all but the
// reserved ones) that are allocated; 1 when none is usable.
func (u Usage) Used() float64 {
	usable := u.Capacity - u.Reserved
	if usable == 0 {
		return 1
	}
	return float64(u.Allocated) / float64(usable)
}

// RangeUsage counts, for each range of cfg in its order, the addresses
// that entries (computed with cfg and reserved) allocate and that bound
// says are bound, and those that reserved and the ranges themselves keep.
func RangeUsage(cfg config.Config, entries iter.Seq[Entry], reserved map[netip.Addr]string, bound func(netip.Addr) bool) []Usage {
	out := make([]Usage, len(cfg.Ranges))
	index := make(map[*config.Range]int, len(cfg.Ranges))
	for i := range cfg.Ranges {
		r := &cfg.Ranges[i]
		out[i] = Usage{Range: r, Capacity: r.Size()}
		index[r] = i
		for _, ip := range []netip.Addr{r.First, r.Last} {
			if r.Unusable(ip) != "" {
				out[i].Reserved++
			}
		}
	}
	for ip := range reserved {
		if b, ok := cfg.Lookup(ip); ok && b.Range.Unusable(ip) == "" {
			out[index[b.Range]].Reserved++
		}
	}
	for e := range entries {
		i, ok := index[e.Binding.Range]
		if !ok {
			continue // computed with another configuration
		}
		out[i].Allocated++
		if bound(e.IP) {
			out[i].Bound++
		}
	}
	for i := range out {
		u := &out[i]
		u.Free = u.Capacity - min(u.Capacity, u.Reserved+u.Allocated)
	}
	return out
}
