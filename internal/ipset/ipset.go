package ipset

import (
	"cmp"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/eip-project/eip/internal/config"
)

// LoadBalancerClass is the spec.loadBalancerClass that names eip. Services of
// type LoadBalancer with no class are served too.
const LoadBalancerClass = "eip.io/eip"

// Entry is one managed IP.
type Entry struct {
	IP netip.Addr
	// Services name the IP, as "namespace/name", sorted, without repeats.
	Services []string
	// Binding is how the IP is bound; Binding.Range points into the Config
	// given to Compute.
	Binding config.Binding
}

// Reasons of a Rejection that tools recognise: kubectl eip status shows an
// address rejected for either as out of range (its range was removed, or
// never existed).
const (
	ReasonOutsideRanges = "outside every configured range"
	ReasonNoRanges      = "no ranges are configured"
)

// Rejection is an IP that a Service names but eip will not bind.
type Rejection struct {
	// Service is "namespace/name".
	Service string
	// IP is the text the Service gives.
	IP string
	// Reason is a sentence fragment for events and status, such as
	// "outside every configured range": "external IP 1.2.3.4 not managed: " + Reason.
	Reason string
}

// IsOurs reports whether eip serves svc as its load balancer: svc is of type
// LoadBalancer and its spec.loadBalancerClass is unset or LoadBalancerClass.
func IsOurs(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		(svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass == LoadBalancerClass)
}

// Compute returns the managed IPs sorted (numerically, IPv4 before IPv6) and
// the refused (Service, IP) pairs sorted by Service then IP. The IPs come
// from spec.externalIPs of every Service and from
// status.loadBalancer.ingress[].ip of the Services IsOurs accepts. reserved
// holds the nodes' own addresses, each mapped to its node's name; they are
// never managed. Cost: O(IPs · log(IPs + ranges)).
func Compute(services []*corev1.Service, cfg config.Config, reserved map[netip.Addr]string) ([]Entry, []Rejection) {
	return ComputeFrom(len(services), func(add func(service, text string)) {
		for _, svc := range services {
			if svc != nil {
				EachIP(svc, add)
			}
		}
	}, cfg, reserved)
}

// EachIP calls add with svc's "namespace/name" and each IP text it names
// as Compute reads them: spec.externalIPs, then, when IsOurs accepts svc,
// status.loadBalancer.ingress[].ip.
func EachIP(svc *corev1.Service, add func(service, text string)) {
	name := svc.Namespace + "/" + svc.Name
	for _, text := range svc.Spec.ExternalIPs {
		add(name, text)
	}
	if IsOurs(svc) {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" { // a hostname-only ingress names no IP
				add(name, ing.IP)
			}
		}
	}
}

// ComputeFrom is Compute of the (Service, IP text) pairs each gives to its
// argument, as EachIP gives them; about n IPs are expected.
func ComputeFrom(n int, each func(add func(service, text string)), cfg config.Config, reserved map[netip.Addr]string) ([]Entry, []Rejection) {
	// Most Services name one IP: size for that to avoid regrowing.
	var (
		entries    = make([]Entry, 0, n)
		rejections []Rejection
		index      = make(map[netip.Addr]int, n)
	)
	add := func(service, text string) {
		ip, err := netip.ParseAddr(text)
		if err != nil {
			rejections = append(rejections, Rejection{Service: service, IP: text, Reason: "not a valid IP address"})
			return
		}
		if i, ok := index[ip]; ok {
			entries[i].Services = append(entries[i].Services, service)
			return
		}
		b, reason := Judge(ip, cfg, reserved)
		if reason != "" {
			rejections = append(rejections, Rejection{Service: service, IP: text, Reason: reason})
			return
		}
		index[ip] = len(entries)
		entries = append(entries, Entry{IP: ip, Services: []string{service}, Binding: b})
	}
	each(add)

	slices.SortFunc(entries, func(a, b Entry) int { return a.IP.Compare(b.IP) })
	for i := range entries {
		if s := entries[i].Services; len(s) > 1 {
			slices.Sort(s)
			entries[i].Services = slices.Compact(s)
		}
	}
	slices.SortFunc(rejections, func(a, b Rejection) int {
		return cmp.Or(cmp.Compare(a.Service, b.Service), cmp.Compare(a.IP, b.IP))
	})
	return entries, slices.Compact(rejections)
}

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
