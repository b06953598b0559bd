package policy

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
)

// Input is one node's view of the managed IPs, as the planners need it.
type Input struct {
	// Policy is config.PolicySticky or config.PolicySpread; anything else
	// is treated as sticky, the default.
	Policy config.Policy
	// Live lists the live, eligible nodes, in any order.
	Live []string
	// Holders maps every managed IP to its current holder if that holder is
	// live, else to "". A holder not in Live counts as "".
	Holders map[netip.Addr]string
	// Preferred maps an IP to its preferred nodes, best first (a Service
	// annotation or the ConfigMap default). May be nil.
	Preferred map[netip.Addr][]string
	// Only restricts the nodes some IPs may live on (externalTrafficPolicy:
	// Local): such an IP is planned only onto a live node it allows. May be
	// nil.
	Only map[netip.Addr]lease.Only
}

// Plan returns, for each IP that should change hands, the node that should
// hold it: for a held IP the handoff target (the holder hands it off), for
// an unheld IP the node that should take it first (the others fall back to
// rendezvous rank later). IPs absent from the result stay where they are,
// or are raced for by rank. The plan depends only on the input's content,
// never on the order of Live or of map iteration, so every node computes
// the same plan from the same view; ties break by rendezvous rank
// (lease.Order).
func Plan(in Input) map[netip.Addr]string {
	plan := map[netip.Addr]string{}
	live := liveNodes(in.Live)
	if len(live) == 0 {
		return plan
	}
	isLive := make(map[string]bool, len(live))
	for _, n := range live {
		isLive[n] = true
	}
	p := planner{in: in, live: live, isLive: isLive, plan: plan}
	if in.Policy == config.PolicySpread {
		p.spread()
	} else {
		p.sticky()
	}
	return plan
}

type planner struct {
	in     Input
	live   []string // sorted, unique, no ""
	isLive map[string]bool
	plan   map[netip.Addr]string
}

func liveNodes(nodes []string) []string {
	out := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == "" })
	slices.Sort(out)
	return slices.Compact(out)
}

// holder is the live holder of ip, or "".
func (p *planner) holder(ip netip.Addr) string {
	if h := p.in.Holders[ip]; p.isLive[h] {
		return h
	}
	return ""
}

// preferred is the first live node of ip's preferred list that ip
// allows, or "".
func (p *planner) preferred(ip netip.Addr) string {
	only := p.in.Only[ip]
	for _, n := range p.in.Preferred[ip] {
		if p.isLive[n] && only.Allows(n) {
			return n
		}
	}
	return ""
}

// pinned is where spread puts an IP it does not balance: its live
// preferred node, else, for an IP restricted to some nodes, its holder if
// allowed or the best-ranked live node allowed. "" when the IP is
// balanced, or when no live node may hold it (lease.Decide then releases
// it).
func (p *planner) pinned(ip netip.Addr) (string, bool) {
	if pref := p.preferred(ip); pref != "" {
		return pref, true
	}
	only, restricted := p.in.Only[ip]
	if !restricted || !only.Restricted {
		return "", false
	}
	if h := p.holder(ip); h != "" && only.Allows(h) {
		return h, true
	}
	if allowed := only.Of(p.live); len(allowed) > 0 {
		return lease.Order(ip, allowed)[0], true
	}
	return "", true
}

// sticky moves only IPs whose preferred node is live and not their holder.
// Unheld IPs without a live preference get no entry: rendezvous rank
// already spreads a dead node's IPs over the survivors.
func (p *planner) sticky() {
	for ip := range p.in.Holders {
		if pref := p.preferred(ip); pref != "" && pref != p.holder(ip) {
			p.plan[ip] = pref
		}
	}
}

// load is one live node's share under spread.
type load struct {
	name   string
	pinned int          // IPs whose first live preferred node this is
	held   []netip.Addr // IPs it holds that no live preference pins
	quota  int          // unpinned IPs it should end with
}

// spread balances the IPs over the live nodes with as few handoffs as
// possible:
//
//  1. An IP with a live preferred node goes there and counts as that node's
//     load ("pinned"); so does one restricted to some nodes, to its holder
//     if allowed, else to the best-ranked live node it allows.
//  2. Quotas: the unpinned IPs are shared so that every node that is not
//     already over the level with pinned IPs alone ends at level L or L+1
//     (L = ⌊n/k⌋ and the familiar ⌊n/k⌋/⌈n/k⌉ when nothing is pinned). The
//     L+1 slots go first to nodes holding more than L, each such slot
//     saving one handoff; so the number of handoffs is the minimum.
//  3. A node over its quota keeps the IPs it ranks best on against the
//     nodes under their quota, and gives away the rest.
//  4. Unheld IPs, then the given-away ones, each go to the best-ranked node
//     (rendezvous rank of the IP) among those still under their quota.
func (p *planner) spread() {
	loads := make([]*load, len(p.live))
	byName := make(map[string]*load, len(p.live))
	for i, n := range p.live {
		loads[i] = &load{name: n}
		byName[n] = loads[i]
	}
	// Map order does not matter: only the unheld pool needs an order, and
	// giveAway sorts what it gives.
	var pool []netip.Addr // unheld first, then given away
	free := 0
	for ip := range p.in.Holders {
		h := p.holder(ip)
		if pin, ok := p.pinned(ip); ok {
			if pin != "" {
				byName[pin].pinned++
			}
			if pin != "" && h != pin {
				p.plan[ip] = pin
			}
			continue
		}
		free++
		if h == "" {
			pool = append(pool, ip)
		} else {
			byName[h].held = append(byName[h].held, ip)
		}
	}
	slices.SortFunc(pool, netip.Addr.Compare)
	setQuotas(loads, free)

	var needy []string
	for _, l := range loads {
		if len(l.held) < l.quota {
			needy = append(needy, l.name)
		}
	}
	for _, l := range loads {
		if len(l.held) > l.quota {
			pool = append(pool, l.giveAway(needy)...)
		}
	}

	var open []*load // nodes still under their quota
	room := make(map[string]int, len(loads))
	for _, l := range loads {
		if r := l.quota - min(len(l.held), l.quota); r > 0 {
			open = append(open, l)
			room[l.name] = r
		}
	}
	for _, ip := range pool {
		best := 0
		for i := 1; i < len(open); i++ {
			if ranksBetter(ip, open[i].name, open[best].name) {
				best = i
			}
		}
		t := open[best].name
		p.plan[ip] = t
		if room[t]--; room[t] == 0 {
			open = slices.Delete(open, best, best+1)
		}
	}
}

// setQuotas shares free unpinned IPs: the level L is the highest at which
// topping every node up to L with unpinned IPs needs no more than free; the
// remainder goes one each to nodes at the level, those holding more than
// their base quota first (each saves a handoff), then by most held, then
// by name.
func setQuotas(loads []*load, free int) {
	need := func(level int) int {
		s := 0
		for _, l := range loads {
			s += max(0, level-l.pinned)
		}
		return s
	}
	hi := free
	for _, l := range loads {
		hi = max(hi, free+l.pinned)
	}
	lo := 0 // need(lo) <= free; find the largest such level
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if need(mid) <= free {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	level := lo
	extra := free - need(level)
	var atLevel []*load
	for _, l := range loads {
		l.quota = max(0, level-l.pinned)
		if l.pinned <= level {
			atLevel = append(atLevel, l)
		}
	}
	slices.SortFunc(atLevel, func(a, b *load) int {
		if c := cmp.Compare(boolInt(len(b.held) > b.quota), boolInt(len(a.held) > a.quota)); c != 0 {
			return c
		}
		if c := cmp.Compare(len(b.held), len(a.held)); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	for _, l := range atLevel[:extra] {
		l.quota++
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// giveAway returns the IPs l hands off to get down to its quota: those on
// which the most needy nodes outrank l, ties by address.
func (l *load) giveAway(needy []string) []netip.Addr {
	group := append(slices.Clone(needy), l.name)
	type candidate struct {
		ip   netip.Addr
		rank int
	}
	cs := make([]candidate, len(l.held))
	for i, ip := range l.held {
		cs[i] = candidate{ip, lease.Rank(ip, l.name, group)}
	}
	slices.SortFunc(cs, func(a, b candidate) int {
		if c := cmp.Compare(b.rank, a.rank); c != 0 {
			return c
		}
		return a.ip.Compare(b.ip)
	})
	out := make([]netip.Addr, len(l.held)-l.quota)
	for i := range out {
		out[i] = cs[i].ip
	}
	return out
}

// ranksBetter reports whether a comes before b in lease.Order for ip.
func ranksBetter(ip netip.Addr, a, b string) bool {
	pair := [2]string{a, b}
	return lease.Rank(ip, a, pair[:]) == 0
}
