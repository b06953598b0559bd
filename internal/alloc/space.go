package alloc

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
)

// User is a Service that names an address.
type User struct {
	// Service is "namespace/name".
	Service    string
	SharingKey string
	Ports      []Port
}

// Space is the address space as one node sees it: the configuration, the
// nodes' own addresses, which Services use which address and which locks
// exist. It is not safe for concurrent use.
type Space struct {
	cfg      config.Config
	reserved map[netip.Addr]string
	users    map[netip.Addr][]User
	locks    map[netip.Addr]string // locked address -> the Service it is reserved for, or ""
	// Indexes, so that Assign does not scan every address.
	reservations map[string][]netip.Addr // Service -> addresses reserved for it
	shared       map[string][]netip.Addr // sharing key -> addresses used by a Service with it
}

// NewSpace returns a Space over cfg's ranges; reserved holds the nodes' own
// addresses, each mapped to its node's name.
func NewSpace(cfg config.Config, reserved map[netip.Addr]string) *Space {
	return &Space{
		cfg: cfg, reserved: reserved,
		users:        map[netip.Addr][]User{},
		locks:        map[netip.Addr]string{},
		reservations: map[string][]netip.Addr{},
		shared:       map[string][]netip.Addr{},
	}
}

// AddService records the addresses svc names: spec.externalIPs, and the
// status of a type LoadBalancer Service of any class (an address another
// implementation announces is not free either).
func (s *Space) AddService(svc *ipset.Service) {
	u := UserOf(svc)
	for _, text := range svc.ExternalIPs {
		if ip, err := netip.ParseAddr(text); err == nil {
			s.Use(ip.Unmap(), u)
		}
	}
	if svc.Type == corev1.ServiceTypeLoadBalancer {
		for _, ip := range Current(svc) {
			s.Use(ip.Unmap(), u)
		}
	}
}

// Use records that u names ip.
func (s *Space) Use(ip netip.Addr, u User) {
	for _, o := range s.users[ip] {
		if o.Service == u.Service {
			return
		}
	}
	s.users[ip] = append(s.users[ip], u)
	if u.SharingKey != "" && !slices.Contains(s.shared[u.SharingKey], ip) {
		s.shared[u.SharingKey] = append(s.shared[u.SharingKey], ip)
	}
}

// Lock records that a lock exists for ip; reservedFor is the Service a
// reservation was made for, "" for any other lock.
func (s *Space) Lock(ip netip.Addr, reservedFor string) {
	if old, ok := s.locks[ip]; ok && old != "" && reservedFor == "" {
		return
	}
	s.locks[ip] = reservedFor
	if reservedFor != "" && !slices.Contains(s.reservations[reservedFor], ip) {
		s.reservations[reservedFor] = append(s.reservations[reservedFor], ip)
	}
}

// Result is the allocator's answer for one Service.
type Result struct {
	// IPs are the addresses the Service's status should list: one per
	// family, in the order of Request.Families.
	IPs []netip.Addr
	// Reserve are the addresses of IPs that nobody uses and no lock
	// protects yet: the caller creates their locks (the reservations)
	// before it writes the status.
	Reserve []netip.Addr
	// Refused says, a sentence fragment each, what could not be served.
	Refused []string
}

// Changes reports whether the status listing current must be rewritten to
// list r.IPs. Order does not matter.
func (r Result) Changes(current []netip.Addr) bool {
	a, b := slices.Clone(r.IPs), slices.Clone(current)
	slices.SortFunc(a, netip.Addr.Compare)
	slices.SortFunc(b, netip.Addr.Compare)
	return !slices.Equal(a, b)
}

// Assign answers req for a Service whose status lists current, and records
// the answer in s as used by that Service. A Service keeps what it has
// unless it asks for something else or it is a node's own address; a
// missing family gets, in order: an
// address already reserved for the Service, an address shared under its
// sharing key, the first free address of its ranges (in the order of
// config.Config.Ranges, lowest address first). With RequireAll, one
// refused family leaves the Service as it is.
func (s *Space) Assign(req Request, current []netip.Addr) Result {
	var res Result
	for _, name := range req.Ranges {
		if !slices.ContainsFunc(s.cfg.Ranges, func(r config.Range) bool { return r.Name == name }) {
			res.Refused = append(res.Refused, fmt.Sprintf("annotation %s: no range is named %q", AnnotationRange, name))
		}
	}
	if len(res.Refused) > 0 {
		res.IPs = slices.Clone(current)
		return res
	}
	cur := firstByFamily(withoutReserved(current, s.reserved))
	for _, f := range req.Families {
		c := s.assignFamily(req, f, cur[f])
		if c.refused != "" {
			res.Refused = append(res.Refused, c.refused)
		}
		if c.ip.IsValid() {
			res.IPs = append(res.IPs, c.ip)
			if c.reserve {
				res.Reserve = append(res.Reserve, c.ip)
			}
		}
	}
	if req.RequireAll && len(res.Refused) > 0 {
		res.IPs, res.Reserve = slices.Clone(current), nil
	}
	u := req.user()
	for _, ip := range res.IPs {
		s.Use(ip, u)
	}
	return res
}

type choice struct {
	ip      netip.Addr
	reserve bool
	refused string
}

func (s *Space) assignFamily(req Request, f corev1.IPFamily, cur netip.Addr) choice {
	if want, ok := req.requested(f); ok {
		if want == cur {
			return choice{ip: cur}
		}
		if why := s.refusal(req, want); why != "" {
			return choice{ip: cur, refused: fmt.Sprintf("requested address %s: %s", want, why)}
		}
		return choice{ip: want, reserve: s.needsLock(req, want)}
	}
	rs := rangesFor(s.cfg, req, f)
	if cur.IsValid() && !outsideNamed(s.cfg, req, rs, cur) {
		return choice{ip: cur}
	}
	if len(rs) == 0 {
		if len(req.Families) > 1 && !req.RequireAll {
			return choice{} // PreferDualStack: this family has nowhere to come from
		}
		if len(req.Ranges) > 0 {
			return choice{refused: fmt.Sprintf("no %s range among the ranges named by annotation %s (%s)", f, AnnotationRange, strings.Join(req.Ranges, ", "))}
		}
		return choice{refused: fmt.Sprintf("no auto-assign %s range is configured", f)}
	}
	if ip, reserve, ok := s.choose(req, rs); ok {
		return choice{ip: ip, reserve: reserve}
	}
	msg := fmt.Sprintf("no free %s address in %s", f, rangesText(rs))
	if cur.IsValid() {
		msg = fmt.Sprintf("keeping %s: %s", cur, msg)
	}
	return choice{ip: cur, refused: msg}
}

// choose picks an address in rs for req: its own reservation, an address
// shared under its key, or the first free one.
func (s *Space) choose(req Request, rs []*config.Range) (netip.Addr, bool, bool) {
	fits := func(ip netip.Addr) bool { return inRanges(rs, ip) && s.refusal(req, ip) == "" }
	if ip, ok := lowest(s.reservations[req.Service], fits); ok {
		return ip, false, true
	}
	if req.SharingKey != "" {
		if ip, ok := lowest(s.shared[req.SharingKey], fits); ok {
			return ip, s.needsLock(req, ip), true
		}
	}
	for _, r := range rs {
		for ip := r.First; ; ip = ip.Next() {
			if s.free(r, ip) {
				return ip, true, true
			}
			if ip == r.Last {
				break
			}
		}
	}
	return netip.Addr{}, false, false
}

func lowest(ips []netip.Addr, ok func(netip.Addr) bool) (netip.Addr, bool) {
	var best netip.Addr
	for _, ip := range ips {
		if ok(ip) && (!best.IsValid() || ip.Less(best)) {
			best = ip
		}
	}
	return best, best.IsValid()
}

// free: nobody uses ip, no lock protects it, and it may be bound.
func (s *Space) free(r *config.Range, ip netip.Addr) bool {
	if len(s.users[ip]) > 0 {
		return false
	}
	if _, locked := s.locks[ip]; locked {
		return false
	}
	if _, node := s.reserved[ip]; node {
		return false
	}
	return r.Unusable(ip) == "" && config.Unusable(ip) == ""
}

// refusal says why req may not have ip, or "" when it may.
func (s *Space) refusal(req Request, ip netip.Addr) string {
	b, why := ipset.Judge(ip, s.cfg, s.reserved)
	if why != "" {
		return why
	}
	if ns := req.namespace(); !b.Range.Allows(ns) {
		return b.Range.NotFor(ns)
	}
	if len(req.Ranges) > 0 && !slices.Contains(req.Ranges, b.Range.Name) {
		return fmt.Sprintf("outside the ranges named by annotation %s (%s)", AnnotationRange, strings.Join(req.Ranges, ", "))
	}
	return s.conflict(req, ip)
}

// conflict says why ip, an address of a range, is not free for req.
func (s *Space) conflict(req Request, ip netip.Addr) string {
	var others []User
	for _, u := range s.users[ip] {
		if u.Service != req.Service {
			others = append(others, u)
		}
	}
	if len(others) == 0 {
		owner, locked := s.locks[ip]
		switch {
		case !locked || owner == req.Service:
			return ""
		case owner == "":
			return "its lock still exists: it is being released"
		default:
			return "reserved for " + owner
		}
	}
	for _, u := range others {
		switch {
		case req.SharingKey == "":
			return fmt.Sprintf("used by %s (Services share an address only when both carry annotation %s with the same value)", u.Service, AnnotationSharingKey)
		case u.SharingKey != req.SharingKey:
			return fmt.Sprintf("used by %s, whose %s differs", u.Service, AnnotationSharingKey)
		}
	}
	for _, u := range others {
		for _, p := range req.Ports {
			if slices.Contains(u.Ports, p) {
				return fmt.Sprintf("port %s clashes with %s, which shares it", p, u.Service)
			}
		}
	}
	return ""
}

// needsLock: req would be the first user of ip and no lock exists, so the
// caller must reserve it.
func (s *Space) needsLock(req Request, ip netip.Addr) bool {
	if _, locked := s.locks[ip]; locked {
		return false
	}
	for _, u := range s.users[ip] {
		if u.Service != req.Service {
			return false
		}
	}
	return true
}

// Settled reports whether a Service with request r whose status lists
// current needs nothing from Space.Assign: every wanted family has an
// address that matches what r asks for, none of them a node's own
// (reserved), and nothing else is listed. It
// needs no Space, so callers build one only when some Service is not
// settled.
func (r Request) Settled(current []netip.Addr, cfg config.Config, reserved map[netip.Addr]string) bool {
	cur := firstByFamily(current)
	if len(cur) != len(current) || slices.ContainsFunc(current, func(ip netip.Addr) bool { return reserved[ip] != "" }) {
		return false
	}
	for f := range cur {
		if !slices.Contains(r.Families, f) {
			return false
		}
	}
	for _, f := range r.Families {
		rs := rangesFor(cfg, r, f)
		c, ok := cur[f]
		switch {
		case !ok:
			if len(r.Families) == 1 || r.RequireAll || len(rs) > 0 {
				return false
			}
		case outsideNamed(cfg, r, rs, c):
			return false
		}
		if want, ok := r.requested(f); ok && want != c {
			return false
		}
	}
	return true
}

func (r Request) requested(f corev1.IPFamily) (netip.Addr, bool) {
	for _, ip := range r.IPs {
		if FamilyOf(ip) == f {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// rangesFor are the ranges req may be given an address of family f from:
// the ranges it names, else the auto-assign ranges, of those its namespace
// may use. They point into cfg.
func rangesFor(cfg config.Config, req Request, f corev1.IPFamily) []*config.Range {
	var out []*config.Range
	for i := range cfg.Ranges {
		r := &cfg.Ranges[i]
		if FamilyOf(r.First) != f || !r.Allows(req.namespace()) {
			continue
		}
		if len(req.Ranges) > 0 && slices.Contains(req.Ranges, r.Name) || len(req.Ranges) == 0 && r.AutoAssign {
			out = append(out, r)
		}
	}
	return out
}

// outsideNamed: the Service names ranges, rs are those of cur's family,
// and cur lies in a configured range that is not one of them, so it is to
// move. An address outside every range stays: its range was removed, and
// the Service keeps it until it asks for another.
func outsideNamed(cfg config.Config, req Request, rs []*config.Range, cur netip.Addr) bool {
	if len(req.Ranges) == 0 || len(rs) == 0 || inRanges(rs, cur) {
		return false
	}
	_, inSome := cfg.Lookup(cur)
	return inSome
}

func inRanges(rs []*config.Range, ip netip.Addr) bool {
	for _, r := range rs {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

func rangesText(rs []*config.Range) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Text
		if r.Name != "" {
			names[i] = r.Name
		}
	}
	if len(names) == 1 {
		return "range " + names[0]
	}
	return "ranges " + strings.Join(names, ", ")
}

// withoutReserved is ips but the nodes' own addresses. A status may list
// one (written by hand, or by another implementation before eip): eip never
// binds it, so a Service does not keep it as it keeps an address whose
// range was removed, and is given another instead.
func withoutReserved(ips []netip.Addr, reserved map[netip.Addr]string) []netip.Addr {
	return slices.DeleteFunc(slices.Clone(ips), func(ip netip.Addr) bool { return reserved[ip] != "" })
}

func firstByFamily(ips []netip.Addr) map[corev1.IPFamily]netip.Addr {
	out := map[corev1.IPFamily]netip.Addr{}
	for _, ip := range ips {
		if _, ok := out[FamilyOf(ip)]; !ok {
			out[FamilyOf(ip)] = ip
		}
	}
	return out
}
