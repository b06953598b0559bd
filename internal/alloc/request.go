package alloc

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// Annotations read on Services, and the one eip writes on reservations.
const (
	// AnnotationIPs requests addresses, comma separated, at most one per
	// family (spec.loadBalancerIP holds only one and is deprecated).
	AnnotationIPs = ipset.AnnotationIPs
	// AnnotationRange names the ranges (config.Range.Name) to allocate
	// from, comma separated; they need not be auto-assign ranges.
	AnnotationRange = ipset.AnnotationRange
	// AnnotationSharingKey lets Services that carry the same key share an
	// address when their ports do not clash.
	AnnotationSharingKey = ipset.AnnotationSharingKey
	// AnnotationReservedFor on a lock Lease marks it as a reservation made
	// for the Service "namespace/name" before that Service's status names
	// the address.
	AnnotationReservedFor = lease.AnnotationReservedFor
)

// Port is a port a Service exposes; two Services sharing an address must
// not expose the same one.
type Port = ipset.Port

// Request is what a Service asks of the allocator.
type Request struct {
	// Service is "namespace/name".
	Service string
	// Families are the IP families wanted, in the Service's order.
	Families []corev1.IPFamily
	// RequireAll: every family or none (RequireDualStack). Otherwise a
	// family without any range to allocate from is skipped.
	RequireAll bool
	// IPs are requested addresses, at most one per family.
	IPs []netip.Addr
	// Ranges are the names of the ranges to allocate from; empty means
	// every auto-assign range.
	Ranges     []string
	SharingKey string
	Ports      []Port
}

// Wants reports whether eip allocates for svc under the ConfigMap's
// load-balancer-class mode: a type LoadBalancer Service of eip's
// (ipset.IsOurs) that is not being deleted.
func Wants(svc *ipset.Service, mode config.ClassMode) bool {
	return ipset.IsOurs(svc, mode) && !svc.Deleting
}

// RequestOf reads what svc asks for. The error says, as a sentence for an
// event, what is wrong with the request; nothing is allocated then.
func RequestOf(svc *ipset.Service) (Request, error) {
	if len(svc.TooLong) > 0 {
		return Request{}, fmt.Errorf("annotation %s is longer than %d bytes; eip reads none that long", strings.Join(svc.TooLong, ", "), ipset.MaxAnnotation)
	}
	u := UserOf(svc)
	r := Request{
		Service:    u.Service,
		SharingKey: u.SharingKey,
		Ports:      u.Ports,
		Ranges:     splitList(svc.Annotations[AnnotationRange]),
	}

	ips, err := requestedIPs(svc)
	if err != nil {
		return Request{}, err
	}
	r.IPs = ips

	policy := corev1.IPFamilyPolicySingleStack
	if p := svc.FamilyPolicy; p != nil {
		policy = *p
	}
	r.Families = slices.Clone(svc.Families)
	if len(r.Families) == 0 {
		// The API server always sets ipFamilies; without them, the
		// requested addresses say which families are meant.
		for _, ip := range ips {
			r.Families = append(r.Families, FamilyOf(ip))
		}
		if len(r.Families) == 0 {
			r.Families = []corev1.IPFamily{corev1.IPv4Protocol}
		}
	}
	switch policy {
	case corev1.IPFamilyPolicySingleStack:
		r.Families = r.Families[:1]
	case corev1.IPFamilyPolicyRequireDualStack:
		r.RequireAll = true
	}
	for _, ip := range ips {
		if !slices.Contains(r.Families, FamilyOf(ip)) {
			return Request{}, fmt.Errorf("requested address %s is %s, but the Service's IP families are %s", ip, FamilyOf(ip), familiesText(r.Families))
		}
	}
	return r, nil
}

func (r Request) namespace() string {
	ns, _, _ := strings.Cut(r.Service, "/")
	return ns
}

// requestedIPs reads AnnotationIPs and spec.loadBalancerIP; when both are
// set they must agree.
func requestedIPs(svc *ipset.Service) ([]netip.Addr, error) {
	var ips []netip.Addr
	seen := map[corev1.IPFamily]netip.Addr{}
	for _, text := range splitList(svc.Annotations[AnnotationIPs]) {
		ip, err := netip.ParseAddr(text)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %q is not an IP address", AnnotationIPs, text)
		}
		if other, dup := seen[FamilyOf(ip)]; dup {
			return nil, fmt.Errorf("annotation %s: %s and %s are both %s; request at most one address per family", AnnotationIPs, other, ip, FamilyOf(ip))
		}
		seen[FamilyOf(ip)] = ip
		ips = append(ips, ip)
	}
	text := strings.TrimSpace(svc.LoadBalancerIP)
	if text == "" {
		return ips, nil
	}
	ip, err := netip.ParseAddr(text)
	if err != nil {
		return nil, fmt.Errorf("spec.loadBalancerIP %q is not an IP address", text)
	}
	if len(ips) > 0 && !slices.Contains(ips, ip) {
		return nil, errors.New("spec.loadBalancerIP " + ip.String() + " is not among annotation " + AnnotationIPs + "; set one of them")
	}
	if len(ips) == 0 {
		ips = []netip.Addr{ip}
	}
	return ips, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// FamilyOf is the IP family of ip. IPv4-mapped IPv6 addresses are IPv6:
// they are refused later, never silently read as IPv4.
func FamilyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func familiesText(fs []corev1.IPFamily) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// Current returns the addresses svc's status lists, in order, without
// repeats; text that is not an address (or a hostname-only entry) is
// skipped.
func Current(svc *ipset.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Ingress {
		ip, err := netip.ParseAddr(ing.IP)
		if err == nil && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

// user is the Service as a user of an address.
func (r Request) user() User {
	return User{Service: r.Service, SharingKey: r.SharingKey, Ports: r.Ports}
}

// UserOf is svc as a user of the addresses it names, for Space.Use.
func UserOf(svc *ipset.Service) User {
	u := User{Service: svc.Key(), SharingKey: strings.TrimSpace(svc.Annotations[AnnotationSharingKey])}
	for _, p := range svc.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		u.Ports = append(u.Ports, Port{Protocol: proto, Port: p.Port})
	}
	return u
}
