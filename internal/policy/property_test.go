package policy_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/policy"
)

// addrs lets go-cmp compare netip.Addr, whose fields are unexported.
func addrs() cmp.Option { return cmpopts.EquateComparable(netip.Addr{}) }

func nodePool() []string {
	out := make([]string, 30)
	for i := range out {
		out[i] = fmt.Sprintf("node-%02d", i)
	}
	return out
}

// cluster is a random live set over the node pool and random holders.
func randomCluster(rng *rand.Rand) (live []string, holders map[netip.Addr]string) {
	pool := nodePool()
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	live = pool[:1+rng.IntN(20)]
	holders = map[netip.Addr]string{}
	n := rng.IntN(501)
	// Skew: some nodes hold far more than others.
	weights := make([]int, len(live))
	for i := range weights {
		weights[i] = 1 + rng.IntN(5)*rng.IntN(5)
	}
	for i := range n {
		ip := ipN(i)
		if rng.IntN(10) == 0 {
			holders[ip] = ""
			continue
		}
		j := rng.IntN(len(live))
		for range weights[j] - 1 {
			if k := rng.IntN(len(live)); weights[k] > weights[j] {
				j = k
			}
		}
		holders[ip] = live[j]
	}
	return slices.Clone(live), holders
}

// churn kills and adds a few nodes: the dead nodes' IPs become unheld.
func churn(rng *rand.Rand, live []string, holders map[netip.Addr]string) ([]string, map[netip.Addr]string) {
	next := slices.Clone(live)
	for range rng.IntN(3) {
		if len(next) > 0 {
			i := rng.IntN(len(next))
			next = slices.Delete(next, i, i+1)
		}
	}
	for range rng.IntN(3) {
		if n := nodePool()[rng.IntN(30)]; !slices.Contains(next, n) && len(next) < 20 {
			next = append(next, n)
		}
	}
	out := map[netip.Addr]string{}
	for ip, h := range holders {
		if !slices.Contains(next, h) {
			h = ""
		}
		out[ip] = h
	}
	return next, out
}

// shuffled is in with Live reordered and every map rebuilt in another
// insertion order: the plan must not change.
func shuffled(rng *rand.Rand, in policy.Input) policy.Input {
	out := in
	out.Live = slices.Clone(in.Live)
	rng.Shuffle(len(out.Live), func(i, j int) { out.Live[i], out.Live[j] = out.Live[j], out.Live[i] })
	ips := make([]netip.Addr, 0, len(in.Holders))
	for ip := range in.Holders {
		ips = append(ips, ip)
	}
	rng.Shuffle(len(ips), func(i, j int) { ips[i], ips[j] = ips[j], ips[i] })
	out.Holders = make(map[netip.Addr]string, len(ips))
	for _, ip := range ips {
		out.Holders[ip] = in.Holders[ip]
	}
	if in.Preferred != nil {
		out.Preferred = map[netip.Addr][]string{}
		for _, ip := range ips {
			if p, ok := in.Preferred[ip]; ok {
				out.Preferred[ip] = p
			}
		}
		for ip, p := range in.Preferred {
			out.Preferred[ip] = p
		}
	}
	return out
}

// minMoves is the fewest handoffs of held IPs that leave every one of the k
// live nodes with ⌊n/k⌋ or ⌈n/k⌉: every IP a node holds above ⌊n/k⌋ must
// go, except that each of the n mod k ⌈n/k⌉ slots, given to a node holding
// more than ⌊n/k⌋, spares one.
func minMoves(in policy.Input) int {
	n, k := len(in.Holders), len(in.Live)
	floor, ceilSlots := n/k, n%k
	over, excess := 0, 0
	for node, c := range counts(in.Holders) {
		if slices.Contains(in.Live, node) && c > floor {
			over++
			excess += c - floor
		}
	}
	return excess - min(ceilSlots, over)
}

// firstLive is the first live preferred node of ip, or "".
func firstLive(in policy.Input, ip netip.Addr) string {
	for _, n := range in.Preferred[ip] {
		if slices.Contains(in.Live, n) {
			return n
		}
	}
	return ""
}

// balanced: no unpinned IP could move to a node with two fewer IPs.
func balanced(in policy.Input, after map[netip.Addr]string) error {
	c := counts(after)
	least := len(after)
	for _, n := range in.Live {
		least = min(least, c[n])
	}
	for ip, h := range after {
		if firstLive(in, ip) == "" && c[h] > least+1 {
			return fmt.Errorf("%s holds %d (unpinned %s among them), another node %d", h, c[h], ip, least)
		}
	}
	return nil
}

// checkPlan asserts what every plan must satisfy and returns the holders
// after it is applied.
func checkPlan(t *testing.T, rng *rand.Rand, in policy.Input) map[netip.Addr]string {
	t.Helper()
	plan := policy.Plan(in)
	assert.DeepEqual(t, policy.Plan(shuffled(rng, in)), plan, addrs())
	for ip, target := range plan {
		assert.Assert(t, slices.Contains(in.Live, target), "%s planned onto %s, not live", ip, target)
		assert.Assert(t, target != in.Holders[ip], "%s planned onto its holder", ip)
		_, managed := in.Holders[ip]
		assert.Assert(t, managed, "%s is not managed", ip)
	}
	after := apply(in, plan)
	for ip := range in.Holders {
		if pref := firstLive(in, ip); pref != "" {
			assert.Equal(t, after[ip], pref, "%s on its first live preferred node", ip)
		}
	}
	if len(in.Live) == 0 {
		assert.Equal(t, len(plan), 0)
		return after
	}
	switch in.Policy {
	case config.PolicySticky:
		for ip, target := range plan {
			assert.Equal(t, target, firstLive(in, ip), "sticky moves %s for no preference", ip)
		}
	case config.PolicySpread:
		for ip := range in.Holders {
			if in.Holders[ip] == "" {
				assert.Assert(t, plan[ip] != "", "spread leaves unheld %s to rank", ip)
			}
		}
		assert.NilError(t, balanced(in, after))
		if in.Preferred == nil {
			assert.Equal(t, movedHeld(in, plan), minMoves(in))
			f := len(in.Holders) / len(in.Live)
			c := counts(after)
			for _, n := range in.Live {
				assert.Assert(t, c[n] == f || c[n] == f+1, "%s holds %d of %d on %d nodes", n, c[n], len(in.Holders), len(in.Live))
			}
		}
	}
	again := in
	again.Holders = after
	assert.Equal(t, len(policy.Plan(again)), 0, "a second plan on the applied result moves something")
	return after
}

func TestPlanProperties(t *testing.T) {
	for _, p := range []config.Policy{config.PolicySticky, config.PolicySpread} {
		for _, withPref := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/preferred=%v", p, withPref), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(2026, 5))
				for range 60 {
					live, holders := randomCluster(rng)
					var pref map[netip.Addr][]string
					if withPref {
						pref = randomPreferred(rng, holders)
					}
					for range 5 {
						in := policy.Input{Policy: p, Live: live, Holders: holders, Preferred: pref}
						holders = checkPlan(t, rng, in)
						live, holders = churn(rng, live, holders)
					}
				}
			})
		}
	}
}

func randomPreferred(rng *rand.Rand, holders map[netip.Addr]string) map[netip.Addr][]string {
	pool := nodePool()
	pref := map[netip.Addr][]string{}
	for ip := range holders {
		if rng.IntN(5) == 0 {
			list := make([]string, 1+rng.IntN(3))
			for i := range list {
				list[i] = pool[rng.IntN(len(pool))]
			}
			pref[ip] = list
		}
	}
	return pref
}

// Sticky without preferences never moves a held IP, whatever happens.
func TestStickyNeverMovesHeld(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for range 100 {
		live, holders := randomCluster(rng)
		for range 5 {
			in := policy.Input{Policy: config.PolicySticky, Live: live, Holders: holders}
			assert.Equal(t, len(policy.Plan(in)), 0)
			holders = apply(in, nil)
			live, holders = churn(rng, live, holders)
		}
	}
}

// On small clusters, compare spread with every possible assignment: its
// plan is balanced and moves exactly as few held IPs as the best balanced
// assignment, preferences included.
func TestSpreadMinimalAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 41))
	all := []string{"a", "b", "c", "z"}
	for trial := range 400 {
		live := all[:1+rng.IntN(3)]
		n := rng.IntN(8)
		holders := map[netip.Addr]string{}
		pref := map[netip.Addr][]string{}
		for i := range n {
			h := ""
			if rng.IntN(4) != 0 {
				h = live[rng.IntN(len(live))]
			}
			holders[ipN(i)] = h
			if rng.IntN(3) == 0 {
				pref[ipN(i)] = []string{all[rng.IntN(len(all))]}
			}
		}
		in := policy.Input{Policy: config.PolicySpread, Live: live, Holders: holders, Preferred: pref}
		plan := policy.Plan(in)
		assert.NilError(t, balanced(in, apply(in, plan)), "trial %d", trial)
		assert.Equal(t, movedHeld(in, plan), bruteMinMoves(in), "trial %d: %v holders %v pref %v", trial, plan, holders, pref)
	}
}

// bruteMinMoves tries every assignment of the IPs to live nodes.
func bruteMinMoves(in policy.Input) int {
	ips := make([]netip.Addr, 0, len(in.Holders))
	for ip := range in.Holders {
		ips = append(ips, ip)
	}
	best := len(ips) + 1
	assign := map[netip.Addr]string{}
	var try func(i int)
	try = func(i int) {
		if i == len(ips) {
			if balanced(in, assign) != nil {
				return
			}
			moves := 0
			for ip, h := range in.Holders {
				if h != "" && assign[ip] != h {
					moves++
				}
			}
			best = min(best, moves)
			return
		}
		ip := ips[i]
		if pref := firstLive(in, ip); pref != "" {
			assign[ip] = pref
			try(i + 1)
			return
		}
		for _, n := range in.Live {
			assign[ip] = n
			try(i + 1)
		}
	}
	try(0)
	return best
}
