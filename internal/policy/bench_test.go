package policy_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/policy"
)

// BenchmarkPlan plans 5,000 IPs over 20 nodes in the situations a cluster
// meets: steady state, a node gone, a node joined, and a cold start.
func BenchmarkPlan(b *testing.B) {
	const ips, nodes = 5000, 20
	live := make([]string, nodes)
	for i := range live {
		live[i] = fmt.Sprintf("node-%02d", i)
	}
	settled := func(live []string) map[netip.Addr]string {
		in := policy.Input{Policy: config.PolicySpread, Live: live, Holders: spreadOver(0, ips, "")}
		return apply(in, policy.Plan(in))
	}
	balanced := settled(live)
	gone := map[netip.Addr]string{}
	for ip, h := range balanced {
		if h == live[0] {
			h = ""
		}
		gone[ip] = h
	}
	pref := map[netip.Addr][]string{}
	for i := range ips / 10 {
		pref[ipN(i*10)] = []string{live[i%nodes]}
	}
	for _, bc := range []struct {
		name string
		in   policy.Input
	}{
		{"sticky/steady", policy.Input{Policy: config.PolicySticky, Live: live, Holders: balanced, Preferred: pref}},
		{"spread/steady", policy.Input{Policy: config.PolicySpread, Live: live, Holders: balanced}},
		{"spread/node-gone", policy.Input{Policy: config.PolicySpread, Live: live[1:], Holders: gone}},
		{"spread/node-joined", policy.Input{Policy: config.PolicySpread, Live: append(live[:nodes:nodes], "node-new"), Holders: balanced}},
		{"spread/preferred", policy.Input{Policy: config.PolicySpread, Live: live, Holders: balanced, Preferred: pref}},
		{"spread/cold-start", policy.Input{Policy: config.PolicySpread, Live: live, Holders: spreadOver(0, ips, "")}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				policy.Plan(bc.in)
			}
			b.ReportMetric(float64(len(policy.Plan(bc.in))), "moves")
		})
	}
}
