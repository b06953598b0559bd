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
// (PerNamespace) is given to reject with the reason instead of to add.
// A Service's claims count in the order it names them, which each gives
// one after another (as EachIP does). A namespace's count in the order of
// ownership: first the claims of the Service that incumbents says its
// address's lock records, whatever their age, then the others, older
// Services first (creationTimestamp, then name). So every node refuses
// the same ones, and a Service of the namespace, older or not, never takes
// the place of an address the namespace already serves. Claims Compute
// drops or refuses whatever the caps (text that is not an address,
// spec.externalIPs with external-ips off, another load balancer's) count
// against none.
func capped(each func(add func(Claim)), cfg config.Config, incumbents Incumbents, reject func(Claim, string)) func(add func(Claim)) {
	caps := cfg.Caps
	if caps == (config.Caps{}) {
		return each
	}
	counts := func(c Claim) (netip.Addr, bool) {
		ip, err := netip.ParseAddr(c.IP)
		return ip, err == nil && (!c.External || cfg.ExternalIPs) && (!c.Classless || cfg.LoadBalancerClass == config.ClassAny)
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
		// incumbent: c's Service is the owner its address's lock records.
		type counted struct {
			c         Claim
			incumbent bool
		}
		var all []counted
		each(func(c Claim) {
			ip, ok := counts(c)
			switch {
			case !ok:
				add(c)
			case !admit(c):
			case caps.PerNamespace == 0:
				add(c)
			default:
				all = append(all, counted{c, incumbents != nil && c.is(incumbents(ip))})
			}
		})
		// Stable: a Service's claims keep the order it names them in.
		slices.SortStableFunc(all, func(a, b counted) int {
			if a.incumbent != b.incumbent {
				if a.incumbent {
					return -1
				}
				return 1
			}
			return cmp.Or(a.c.Created.Compare(b.c.Created), cmp.Compare(a.c.Service, b.c.Service))
		})
		perNamespace := map[string]int{}
		for _, a := range all {
			ns := a.c.namespace()
			if perNamespace[ns]++; perNamespace[ns] > caps.PerNamespace {
				reject(a.c, fmt.Sprintf("the Services of namespace %s name more than %d addresses (max-ips-per-namespace in the ConfigMap); the addresses' recorded owners go first, then older Services", ns, caps.PerNamespace))
				continue
			}
			add(a.c)
		}
	}
}
