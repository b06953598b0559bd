package ipset

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/eip-project/eip/internal/config"
)

// capped is each with the caps of cfg applied: a claim beyond its
// Service's cap (config.Caps.PerService) or its namespace's
// (PerNamespace) is given to reject with the reason instead of to add. A
// Service's claims count in the order it names them, which each gives one
// after another (as EachIP does); a namespace's in the order of
// ownership, older Services first (creationTimestamp, then name), so that
// every node refuses the same ones and a Service created later never
// takes an address from an older one. Claims Compute drops or refuses
// whatever the caps (text that is not an address, spec.externalIPs with
// external-ips off, another load balancer's) count against none.
func capped(each func(add func(Claim)), cfg config.Config, reject func(Claim, string)) func(add func(Claim)) {
	caps := cfg.Caps
	if caps == (config.Caps{}) {
		return each
	}
	counts := func(c Claim) bool {
		_, err := netip.ParseAddr(c.IP)
		return err == nil && (!c.External || cfg.ExternalIPs) && (!c.Classless || cfg.LoadBalancerClass == config.ClassAny)
	}
	var service string // the Service whose claims come now
	var named int      // how many of them were let in
	admit := func(c Claim) bool {
		if c.Service != service {
			service, named = c.Service, 0
		}
		if named++; caps.PerService > 0 && named > caps.PerService {
			reject(c, fmt.Sprintf("the Service names more than %d addresses (max-ips-per-service in the ConfigMap)", caps.PerService))
			return false
		}
		return true
	}
	return func(add func(Claim)) {
		if caps.PerNamespace == 0 {
			each(func(c Claim) {
				if !counts(c) || admit(c) {
					add(c)
				}
			})
			return
		}
		var all []Claim
		each(func(c Claim) { all = append(all, c) })
		slices.SortStableFunc(all, func(a, b Claim) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Service, b.Service))
		})
		perNamespace := map[string]int{}
		for _, c := range all {
			if !counts(c) {
				add(c)
				continue
			}
			if !admit(c) {
				continue
			}
			ns := c.namespace()
			if perNamespace[ns]++; perNamespace[ns] > caps.PerNamespace {
				reject(c, fmt.Sprintf("the Services of namespace %s name more than %d addresses (max-ips-per-namespace in the ConfigMap); older Services' go first", ns, caps.PerNamespace))
				continue
			}
			add(c)
		}
	}
}
