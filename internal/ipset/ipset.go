package ipset

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/eip-project/eip/internal/config"
)

// LoadBalancerClass is the spec.loadBalancerClass that names eip. Services of
// type LoadBalancer with no class are served too, unless the ConfigMap's
// load-balancer-class is "only" (config.ClassOnly).
const LoadBalancerClass = "eip.io/eip"

// Annotations eip reads on a Service to decide who holds an IP and where.
const (
	// AnnotationSharingKey lets Services of different namespaces use one
	// address when both carry the same value (and lets LoadBalancer
	// Services share an allocated address, see package alloc).
	AnnotationSharingKey = "eip.io/sharing-key"
	// AnnotationPreferredNodes lists the nodes a Service's IPs should live
	// on, in order of preference, separated by commas or spaces.
	AnnotationPreferredNodes = "eip.io/preferred-nodes"
	// AnnotationShareWith, on the Service that owns an address, lists the
	// other namespaces whose Services may share it (with its sharing key),
	// separated by commas or spaces: the owner's consent, which a key
	// anyone may read cannot give.
	AnnotationShareWith = "eip.io/share-with"
	// AnnotationIPs and AnnotationRange are what a LoadBalancer Service
	// asks of the allocator (package alloc).
	AnnotationIPs   = "eip.io/load-balancer-ips"
	AnnotationRange = "eip.io/range"
)

// Entry is one managed IP.
type Entry struct {
	IP netip.Addr
	// Services name the IP and are served by it, as "namespace/name",
	// sorted, without repeats: its Owner, the Services of the Owner's
	// namespace, and those of other namespaces that carry the Owner's
	// sharing key.
	Services []string
	// Local are those of Services with externalTrafficPolicy: Local,
	// sorted: kube-proxy delivers their traffic only to a node's own
	// endpoints, so the IP lives only where each has one (package
	// endpoints). Nil when there are none.
	Local []string
	// Owner is the Service that owns the IP: the one its lock records,
	// while that Service still names the IP and may use it, else the
	// oldest Service naming the IP that may use it (creationTimestamp,
	// then "namespace/name"). Every node and `kubectl eip status` agree on
	// it from the Services and the lock, without talking to each other.
	Owner Owner
	// Preferred are the nodes the IP should live on, from the
	// AnnotationPreferredNodes of the first Service of the Owner's
	// namespace (in the order of Services) that carries a valid one; nil
	// when none does.
	Preferred []string
	// Binding is how the IP is bound; Binding.Range points into the Config
	// given to Compute.
	Binding config.Binding
}

// Owner is a Service that owns an IP, as the IP's lock records it: its
// "namespace/name" and UID. A Service deleted and made again under the
// same name is another Service: it has another UID.
type Owner struct {
	Service string
	UID     types.UID
}

// Incumbents says which Service the lock of ip records as its owner; the
// zero Owner when ip has no lock or its lock records none. A nil
// Incumbents is a cluster without locks.
type Incumbents func(ip netip.Addr) Owner

// Reasons of a Rejection that tools recognise: kubectl eip status shows an
// address rejected for either as out of range (its range was removed, or
// never existed).
const (
	ReasonOutsideRanges = "outside every configured range"
	ReasonNoRanges      = "no ranges are configured"
)

// ReasonExternalIPsOff is why an address of spec.externalIPs is refused
// with the external-ips key off.
const ReasonExternalIPsOff = "spec.externalIPs are not managed (external-ips: off in the ConfigMap); only the addresses of LoadBalancer Services are"

// Rejection is an IP that a Service names but eip will not bind for it, or,
// with Preference, a preference of the Service that eip does not honour.
type Rejection struct {
	// Service is "namespace/name".
	Service string
	// IP is the text the Service gives.
	IP string
	// Reason is a sentence fragment for events and status, such as
	// "outside every configured range": "external IP 1.2.3.4 not managed: " + Reason.
	Reason string
	// Preference: the IP is served (for this Service or another), but the
	// Service's AnnotationPreferredNodes does not decide where it lives.
	Preference bool
}

// IsOurs reports whether eip serves svc as its load balancer under the
// ConfigMap's load-balancer-class: svc is of type LoadBalancer and its
// spec.loadBalancerClass is LoadBalancerClass, or unset with mode
// config.ClassAny.
func IsOurs(svc *Service, mode config.ClassMode) bool {
	return mayBeOurs(svc) && (svc.Class != nil || mode == config.ClassAny)
}

// mayBeOurs reports whether svc is eip's under some load-balancer-class:
// of type LoadBalancer, its class unset or LoadBalancerClass.
func mayBeOurs(svc *Service) bool {
	return svc.Type == corev1.ServiceTypeLoadBalancer && (svc.Class == nil || *svc.Class == LoadBalancerClass)
}

// Claim is one IP text a Service names, with what decides whether the
// Service may have it.
type Claim struct {
	// Service is "namespace/name", UID the Service's.
	Service string
	UID     types.UID
	// IP is the text the Service gives.
	IP string
	// External: the text comes from spec.externalIPs, else from the
	// load-balancer status.
	External bool
	// Created is the Service's creationTimestamp.
	Created time.Time
	// SharingKey, Preferred and ShareWith are the Service's
	// AnnotationSharingKey, AnnotationPreferredNodes and
	// AnnotationShareWith.
	SharingKey, Preferred, ShareWith string
	// Ports are the Service's ports: Services of different namespaces
	// share an address only on different ports.
	Ports []Port
	// Local: the Service's externalTrafficPolicy is Local.
	Local bool
	// Classless: the text is a load-balancer address of a Service without
	// a spec.loadBalancerClass, which is eip's only under
	// load-balancer-class "any".
	Classless bool
}

func (c Claim) namespace() string {
	ns, _, _ := strings.Cut(c.Service, "/")
	return ns
}

// owns says whether c owns an address rather than o, both naming it and
// allowed it, where the address's lock records rec as its owner: the
// recorded owner first, whatever its age, so that a Service of another
// namespace, older, cannot take an address by naming it; else the older.
func (c Claim) owns(o Claim, rec Owner) bool {
	switch {
	case rec.Service == "" || c.is(rec) == o.is(rec):
		return c.older(o)
	default:
		return c.is(rec)
	}
}

// is says whether c is a claim of the Service o.
func (c Claim) is(o Owner) bool { return c.Service == o.Service && c.UID == o.UID }

// older orders claims by their Service's age, then its name.
func (c Claim) older(o Claim) bool {
	if !c.Created.Equal(o.Created) {
		return c.Created.Before(o.Created)
	}
	return c.Service < o.Service
}

// Compute returns the managed IPs sorted (numerically, IPv4 before IPv6) and
// the refused (Service, IP) pairs sorted by Service then IP. The IPs come
// from spec.externalIPs of every Service (unless cfg.ExternalIPs is off)
// and from status.loadBalancer.ingress[].ip of the Services IsOurs accepts
// under cfg.LoadBalancerClass.
// reserved holds the nodes' own addresses, each mapped to its node's name;
// they are never managed; incumbents the owners the locks record.
// Cost: O(IPs · log(IPs + ranges)).
func Compute(services []*Service, cfg config.Config, reserved map[netip.Addr]string, incumbents Incumbents) ([]Entry, []Rejection) {
	return ComputeFrom(len(services), func(add func(Claim)) {
		for _, svc := range services {
			if svc != nil {
				EachIP(svc, add)
			}
		}
	}, cfg, reserved, incumbents)
}

// EachIP calls add with each IP text svc names as Compute reads them:
// spec.externalIPs, then, when IsOurs accepts svc under some
// load-balancer-class, status.loadBalancer.ingress[].ip (Classless when
// svc has no class: ComputeFrom drops those under config.ClassOnly).
func EachIP(svc *Service, add func(Claim)) {
	c := Claim{
		Service: svc.Key(), UID: svc.UID, Created: svc.Created,
		SharingKey: strings.TrimSpace(svc.Annotations[AnnotationSharingKey]), Preferred: svc.Annotations[AnnotationPreferredNodes],
		ShareWith: svc.Annotations[AnnotationShareWith], Ports: svc.Ports, Local: svc.Local,
	}
	c.External = true
	for _, text := range svc.ExternalIPs {
		c.IP = text
		add(c)
	}
	if mayBeOurs(svc) {
		c.External, c.Classless = false, svc.Class == nil
		for _, ing := range svc.Ingress {
			if ing.IP != "" { // a hostname-only ingress names no IP
				c.IP = ing.IP
				add(c)
			}
		}
	}
}

// ComputeFrom is Compute of the claims each gives to its argument, as
// EachIP gives them; about n IPs are expected.
//
// A claim is refused when its text is not an address, when external-ips is
// off and it comes from spec.externalIPs, when it is beyond its Service's
// or namespace's cap (config.Caps, see capped), when Judge refuses its address,
// and when the address's range is not for the Service's namespace. Of the
// claims left for one address, the Service that incumbents says its lock
// records owns it, and when that Service is not among them the oldest
// Service's does; another
// Service's is served along when it is of the owner's namespace or carries
// the owner's sharing key, and refused otherwise: whoever may create a
// Service in one namespace cannot take an address another namespace uses.
func ComputeFrom(n int, each func(add func(Claim)), cfg config.Config, reserved map[netip.Addr]string, incumbents Incumbents) ([]Entry, []Rejection) {
	// Most Services name one IP: size for that to avoid regrowing.
	var (
		entries    = make([]Entry, 0, n)
		owners     = make([]Claim, 0, n) // the owner of each entry so far
		recorded   = make([]Owner, 0, n) // the owner each entry's lock records
		others     []pending             // the entries' other claims
		rejections []Rejection
		index      = make(map[netip.Addr]int, n)
	)
	reject := func(c Claim, reason string) {
		rejections = append(rejections, Rejection{Service: c.Service, IP: c.IP, Reason: reason})
	}
	add := func(c Claim) {
		ip, err := netip.ParseAddr(c.IP)
		switch {
		case err != nil:
			reject(c, "not a valid IP address")
			return
		case c.External && !cfg.ExternalIPs:
			reject(c, ReasonExternalIPsOff)
			return
		case c.Classless && cfg.LoadBalancerClass != config.ClassAny:
			return // another load balancer's: not refused, not reported
		}
		i, ok := index[ip]
		if !ok {
			b, reason := Judge(ip, cfg, reserved)
			if reason != "" {
				reject(c, reason)
				return
			}
			// Indexed even when no claim is let in, so that the address is
			// judged once; an entry without owner is dropped below.
			i, index[ip] = len(entries), len(entries)
			entries = append(entries, Entry{IP: ip, Binding: b})
			owners = append(owners, Claim{})
			var rec Owner
			if incumbents != nil {
				rec = incumbents(ip)
			}
			recorded = append(recorded, rec)
		}
		if r := entries[i].Binding.Range; !r.Allows(c.namespace()) {
			reject(c, r.NotFor(c.namespace()))
			return
		}
		switch {
		case owners[i].Service == "":
			owners[i] = c
		case c.owns(owners[i], recorded[i]):
			others = append(others, pending{i, owners[i]})
			owners[i] = c
		default:
			others = append(others, pending{i, c})
		}
	}
	capped(each, cfg, incumbents, reject)(add)

	var prefs []pending // the claims let in that state a preference
	for i, o := range owners {
		if o.Service == "" {
			continue
		}
		entries[i].Owner, entries[i].Services = Owner{Service: o.Service, UID: o.UID}, []string{o.Service}
		if o.Local {
			entries[i].Local = []string{o.Service}
		}
		if o.Preferred != "" {
			prefs = append(prefs, pending{i, o})
		}
	}
	// Oldest first, so that every node lets in the same claims when ports
	// clash, whatever the order it read the Services in.
	slices.SortFunc(others, func(a, b pending) int {
		if c := cmp.Compare(a.entry, b.entry); c != 0 {
			return c
		}
		if a.claim.older(b.claim) {
			return -1
		}
		return 1
	})
	served := make(map[int][]Claim, len(others)) // the claims let in beside each owner
	for _, p := range others {
		if why := refusal(p.claim, owners[p.entry], served[p.entry]); why != "" {
			reject(p.claim, why)
			continue
		}
		served[p.entry] = append(served[p.entry], p.claim)
		entries[p.entry].Services = append(entries[p.entry].Services, p.claim.Service)
		if p.claim.Local {
			entries[p.entry].Local = append(entries[p.entry].Local, p.claim.Service)
		}
		if p.claim.Preferred != "" {
			prefs = append(prefs, p)
		}
	}
	rejections = append(rejections, preferences(entries, owners, prefs)...)

	entries = slices.DeleteFunc(entries, func(e Entry) bool { return e.Owner.Service == "" })
	slices.SortFunc(entries, func(a, b Entry) int { return a.IP.Compare(b.IP) })
	for i := range entries {
		entries[i].Services = sortedSet(entries[i].Services)
		entries[i].Local = sortedSet(entries[i].Local)
	}
	slices.SortFunc(rejections, func(a, b Rejection) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.IP, b.IP), cmp.Compare(a.Reason, b.Reason))
	})
	return entries, slices.Compact(rejections)
}

// sortedSet sorts s and drops its repeats.
func sortedSet(s []string) []string {
	if len(s) < 2 {
		return s
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// preferences sets the Preferred nodes of entries from prefs, claims let
// in that carry AnnotationPreferredNodes, and returns the preferences it
// does not honour: those of another namespace than the owner's (a tenant
// sharing an address does not choose where it lives) and those that are
// not lists of node names. Of the rest, the Service first by name decides.
func preferences(entries []Entry, owners []Claim, prefs []pending) []Rejection {
	slices.SortFunc(prefs, func(a, b pending) int {
		return cmp.Or(cmp.Compare(a.entry, b.entry), cmp.Compare(a.claim.Service, b.claim.Service))
	})
	var out []Rejection
	ignore := func(c Claim, why string) {
		out = append(out, Rejection{Service: c.Service, IP: c.IP, Reason: why, Preference: true})
	}
	for _, p := range prefs {
		e, owner := &entries[p.entry], owners[p.entry]
		if p.claim.namespace() != owner.namespace() {
			ignore(p.claim, fmt.Sprintf("only Services of namespace %s, which holds the address (%s), choose where it lives", owner.namespace(), owner.Service))
			continue
		}
		nodes, err := config.ParsePreferredNodes(p.claim.Preferred, "annotation "+AnnotationPreferredNodes)
		switch {
		case err != nil:
			ignore(p.claim, strings.ReplaceAll(err.Error(), "\n", "; "))
		case e.Preferred == nil && len(nodes) > 0:
			e.Preferred = nodes
		}
	}
	return out
}

// pending is a claim on entries[entry] that is not (or no longer) its
// owner's.
type pending struct {
	entry int
	claim Claim
}

// refusal says why c may not share the address that owner holds, beside
// the claims of others let in before it, or "". A Service of the owner's
// namespace shares freely; one of another namespace needs the owner's
// sharing key, the owner's consent (AnnotationShareWith lists its
// namespace), and none of its ports served on the address already.
func refusal(c, owner Claim, others []Claim) string {
	switch {
	case c.Service == owner.Service || c.namespace() == owner.namespace():
		return ""
	case c.SharingKey == "" || owner.SharingKey == "":
		return fmt.Sprintf("held for %s, of another namespace (Services of different namespaces share an address only when both carry annotation %s with the same value)",
			owner.Service, AnnotationSharingKey)
	case c.SharingKey != owner.SharingKey:
		return fmt.Sprintf("held for %s, of another namespace, whose annotation %s differs", owner.Service, AnnotationSharingKey)
	case !slices.Contains(strings.FieldsFunc(owner.ShareWith, isListSeparator), c.namespace()):
		return fmt.Sprintf("held for %s, of another namespace, whose annotation %s does not list namespace %s", owner.Service, AnnotationShareWith, c.namespace())
	}
	for _, o := range append([]Claim{owner}, others...) {
		for _, p := range c.Ports {
			if slices.Contains(o.Ports, p) {
				return fmt.Sprintf("held for %s, of another namespace, and port %s is served on it for %s", owner.Service, p, o.Service)
			}
		}
	}
	return ""
}

func isListSeparator(r rune) bool { return r == ',' || unicode.IsSpace(r) }

// Judge returns how ip is bound, or why it is not (a Rejection.Reason):
// the rules of Compute for one address, which the allocator applies too.
func Judge(ip netip.Addr, cfg config.Config, reserved map[netip.Addr]string) (config.Binding, string) {
	if reason := config.Unusable(ip); reason != "" {
		return config.Binding{}, reason
	}
	if what, ok := reserved[ip]; ok {
		return config.Binding{}, what
	}
	if len(cfg.Ranges) == 0 {
		return config.Binding{}, ReasonNoRanges
	}
	b, ok := cfg.Lookup(ip)
	if !ok {
		return config.Binding{}, ReasonOutsideRanges
	}
	if reason := b.Range.Unusable(ip); reason != "" {
		return config.Binding{}, reason
	}
	return b, ""
}

// NodeAddresses are the Nodes' own addresses (internal and external), each
// described as config.NodeAddress words it: eip never binds them for a
// Service.
func NodeAddresses(nodes []*corev1.Node) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out[ip.Unmap()] = config.NodeAddress(n.Name)
			}
		}
	}
	return out
}

// APIEndpoints returns the addresses the EndpointSlices of the kubernetes
// Service list, each as an address of the API server: never bound.
func APIEndpoints(slices []*discoveryv1.EndpointSlice) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out[ip.Unmap()] = config.APIServerAddress
				}
			}
		}
	}
	return out
}
