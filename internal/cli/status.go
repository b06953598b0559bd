package cli

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/policy"
)

// SchemaVersion is the version of the Status schema printed by
// `status -o json|yaml` (docs/status-schema.md). Adding a field keeps it;
// renaming, removing or changing the meaning of one increments it.
const SchemaVersion = 1

// Status is everything `kubectl eip status` reports. Its JSON form is the
// schema documented in docs/status-schema.md; every field is always present.
type Status struct {
	SchemaVersion int       `json:"schemaVersion"`
	Namespace     string    `json:"namespace"`
	ObservedAt    time.Time `json:"observedAt"`
	Config        Config    `json:"config"`
	IPs           []IP      `json:"ips"`
	Nodes         []Node    `json:"nodes"`
	Warnings      []string  `json:"warnings"`

	// ranges are how full each range is, for --ranges; nil while the
	// ConfigMap is invalid.
	ranges []RangeUse
}

// Config describes the ConfigMap as the plugin read it.
type Config struct {
	Name  string `json:"name"`
	Found bool   `json:"found"`
	// Error says why the ConfigMap is not in force; the daemons keep their
	// last good configuration meanwhile. Empty when it is valid.
	Error    string   `json:"error"`
	Warnings []string `json:"warnings"`
	Policy   string   `json:"policy"`
	Ranges   []string `json:"ranges"`
}

// IP is one row of the status table.
type IP struct {
	IP       string   `json:"ip"`
	Services []string `json:"services"`
	State    State    `json:"state"`
	// Reason explains the state in a sentence fragment; empty when bound
	// without remark.
	Reason      string `json:"reason"`
	Holder      string `json:"holder"`
	HolderAlive bool   `json:"holderAlive"`
	MoveTo      string `json:"moveTo"`
	// Successor is the node that takes the IP over when its holder dies
	// (annotation eip.io/successor); empty when the lock names none.
	Successor string `json:"successor"`
	// Interface and PrefixLength are how the IP is bound ("auto" picks the
	// interface whose subnet holds the IP); empty and 0 when eip does not
	// bind it or the configuration is invalid.
	Interface    string `json:"interface"`
	PrefixLength int    `json:"prefixLength"`
	// Announce is how the holder announces the IP: "arp" (gratuitous
	// ARP/NA), "bgp" (a host route to the BGP peers) or "both"; empty when
	// eip does not bind it or the configuration is invalid.
	Announce     string     `json:"announce"`
	Range        string     `json:"range"`
	Lock         string     `json:"lock"`
	Moves        int32      `json:"moves"`
	LastMoveTime *time.Time `json:"lastMoveTime"`
	// ConflictMAC is the MAC of the machine, not an eip node, whose
	// answer keeps the holder from binding the IP (state conflict);
	// ClaimedBy the MAC of one that claims the IP while the holder serves
	// it. Both come from the holder's heartbeat; empty when none.
	ConflictMAC string `json:"conflictMAC"`
	ClaimedBy   string `json:"claimedBy"`
	// Wire is the verdict of the node checking the IP on the LAN.
	Wire Wire `json:"wire"`

	addr netip.Addr // for sorting and filtering; invalid for unparsable text
}

// Node is one node that runs, or ran, eip's daemon.
type Node struct {
	Name string `json:"name"`
	// Alive: the heartbeat was renewed within its lease duration as of
	// Status.ObservedAt, on the plugin's clock.
	Alive                bool       `json:"alive"`
	LastRenewTime        *time.Time `json:"lastRenewTime"`
	LeaseDurationSeconds int        `json:"leaseDurationSeconds"`
	// Eligible: the daemon says it can serve IPs and the Node is not
	// cordoned, excluded or outside the node-selector.
	Eligible bool `json:"eligible"`
	// Reason says why not eligible, or why there is no heartbeat.
	Reason string `json:"reason"`
	// Error is the problem the daemon itself reports (eip.io/error), such as
	// an invalid configuration it refuses.
	Error string `json:"error"`
	// Holds counts the locks naming the node; Bound is the number of IPs
	// its daemon reports bound (eip.io/held).
	Holds int `json:"holds"`
	Bound int `json:"bound"`
	// BGPSessions are the node's sessions in route mode (eip.io/bgp).
	BGPSessions []lease.BGPSession `json:"bgpSessions"`
	// MACs are the link-layer addresses of the node's interfaces, which
	// eip nodes tell each other's answers on the LAN by (eip.io/macs).
	MACs []string `json:"macs"`
	// conflicts and claims are the heartbeat's eip.io/conflicts and
	// eip.io/claims.
	conflicts, claims map[netip.Addr]string
	// wire is the heartbeat's report of the IPs it checks on the LAN.
	wire wireReport

	heartbeat bool
}

// message is the node's problems in one line: why it is not eligible,
// then the error its daemon reports.
func (n Node) message() string {
	switch {
	case n.Reason == "":
		return n.Error
	case n.Error == "":
		return n.Reason
	}
	return n.Reason + ": " + n.Error
}

// snapshot is what the plugin read from the API server.
type snapshot struct {
	namespace string
	configMap string
	// leases are eip's Leases; locks those of its valid locks that were
	// parsed as they were read (the streamed lists), by IP, which leases
	// then leaves out; buildStatus adds the valid locks of leases to it.
	// Likewise services are Services, and claims the IPs named by
	// Services that were read no further.
	leases   []*coordinationv1.Lease
	locks    map[netip.Addr]*lease.Lock
	services []*corev1.Service
	claims   []ipset.Claim
	cm       *corev1.ConfigMap // nil when it does not exist
	nodes    []*corev1.Node
	// endpointSlices are every EndpointSlice, nil when the user may not
	// list them: where Services with externalTrafficPolicy: Local have
	// ready endpoints, and the kubernetes Service's are the API server's
	// addresses, which eip never binds.
	endpointSlices []*discoveryv1.EndpointSlice
}

// buildStatus computes the status from what was read, as of now.
func buildStatus(s snapshot, now time.Time) Status {
	st := Status{
		SchemaVersion: SchemaVersion,
		Namespace:     s.namespace,
		ObservedAt:    now.UTC(),
		IPs:           []IP{},
		Nodes:         []Node{},
		Warnings:      []string{},
	}
	nodeObjs := make(map[string]*corev1.Node, len(s.nodes))
	for _, n := range s.nodes {
		nodeObjs[n.Name] = n
	}
	reserved := ipset.NodeAddresses(s.nodes)
	bySvc, apiEndpoints := slicesByService(s.endpointSlices)
	if s.endpointSlices == nil {
		bySvc = nil
	}
	maps.Copy(reserved, ipset.APIEndpoints(apiEndpoints))
	cfg, known := readConfig(&st, s, reserved)
	heartbeats, locks, byName := readLeases(&st, s.leases, s.locks)

	nodes := buildNodes(heartbeats, locks, byName, nodeObjs, cfg, known, now)
	for _, n := range nodes {
		st.Nodes = append(st.Nodes, *n)
	}
	slices.SortFunc(st.Nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })

	entries, rejections := ipset.ComputeFrom(len(s.services)+len(s.claims), func(add func(ipset.Claim)) {
		for _, svc := range s.services {
			ipset.EachIP(ipset.ServiceOf(svc), add)
		}
		for _, c := range s.claims {
			add(c)
		}
	}, cfg, reserved, func(ip netip.Addr) ipset.Owner {
		if lk := locks[ip]; lk != nil {
			return ipset.Owner{Service: lk.Owner, UID: lk.OwnerUID}
		}
		return ipset.Owner{}
	})
	// One row per IP, in a slice that never grows: the entries' first, in
	// their order (by IP, so that an IP is found among them by binary
	// search), then those only rejected or locked.
	st.IPs = make([]IP, len(entries), len(entries)+len(rejections)+len(locks))
	for i, e := range entries {
		r := &st.IPs[i]
		*r = IP{IP: e.IP.String(), addr: e.IP, Services: e.Services}
		if known {
			r.Interface, r.PrefixLength, r.Range = e.Binding.Iface, e.Binding.Bits, e.Binding.Range.Text
			r.Announce = e.Binding.Announce.String()
		}
	}
	entryOf := func(addr netip.Addr) (int, bool) {
		i := sort.Search(len(entries), func(i int) bool { return entries[i].IP.Compare(addr) >= 0 })
		return i, i < len(entries) && entries[i].IP == addr
	}
	extra := map[string]int{}
	row := func(addr netip.Addr, text string) *IP {
		if addr.IsValid() {
			if i, ok := entryOf(addr); ok {
				return &st.IPs[i]
			}
			text = addr.String()
		}
		if i, ok := extra[text]; ok {
			return &st.IPs[i]
		}
		extra[text] = len(st.IPs)
		st.IPs = append(st.IPs, IP{IP: text, addr: addr, Services: []string{}})
		return &st.IPs[len(st.IPs)-1]
	}
	rejected := map[string]string{}
	// By entry, the Services refused an IP that others are served: the
	// row keeps the served IP's state and names them in its reason.
	refusedFor := map[int][]string{}
	for _, rj := range rejections {
		if rj.Preference {
			continue // the IP is served; the daemons' Event says its placement annotation is ignored
		}
		addr, err := netip.ParseAddr(rj.IP)
		if i, ok := entryOf(addr.Unmap()); err == nil && ok {
			refusedFor[i] = append(refusedFor[i], "refused for "+rj.Service+": "+rj.Reason)
			continue
		}
		r := row(addr.Unmap(), rj.IP)
		r.Services = append(r.Services, rj.Service)
		rejected[r.IP] = rj.Reason
	}
	for _, lk := range locks {
		row(lk.IP, "")
	}
	for i := range st.IPs {
		r := &st.IPs[i]
		var lk *lease.Lock
		if r.addr.IsValid() {
			lk = lockFor(r.addr, locks, byName)
		}
		fillLock(r, lk, nodes)
		reason, isRejected := rejected[r.IP]
		named := i < len(entries)
		r.State, r.Reason = ipState(named, isRejected, reason, lk, r.nodeOf(nodes), known)
		if named {
			placeLocal(r, entries[i], bySvc)
		}
		if notes := refusedFor[i]; len(notes) > 0 {
			if r.Reason != "" {
				notes = append([]string{r.Reason}, notes...)
			}
			r.Reason = strings.Join(notes, "; ")
		}
		r.lanAnswers(r.nodeOf(nodes))
		r.fillWire(nodes)
	}
	if known {
		st.ranges = rangeUses(cfg, entries, reserved, st.IPs[:len(entries)])
	}
	st.IPs = sortIPs(st.IPs)
	slices.Sort(st.Warnings)
	return st
}

func (r *IP) nodeOf(nodes map[string]*Node) *Node {
	if r.Holder == "" {
		return nil
	}
	return nodes[r.Holder]
}

// lanAnswers adds what the holder's heartbeat says of machines that are
// not eip nodes answering for a bound IP.
func (r *IP) lanAnswers(holder *Node) {
	if holder == nil || r.State != StateBound {
		return
	}
	if mac, ok := holder.conflicts[r.addr]; ok {
		r.State, r.ConflictMAC = StateConflict, mac
		r.Reason = "in use on the LAN by " + mac + ", which is not an eip node; " + holder.Name + " does not bind it and probes again until it is free"
		return
	}
	if mac, ok := holder.claims[r.addr]; ok {
		r.ClaimedBy = mac
		why := "also claimed on the LAN by " + mac + ", which is not an eip node: both answer for it until that machine lets go"
		if r.Reason != "" {
			why = r.Reason + "; " + why
		}
		r.Reason = why
	}
}

// sortIPs orders rows by compareIPs. They are in order already unless some
// IPs are only rejected or locked; then they are sorted as pointers and
// copied once, an IP being a few hundred bytes.
func sortIPs(rows []IP) []IP {
	sorted := true
	for i := 1; i < len(rows) && sorted; i++ {
		sorted = compareIPs(&rows[i-1], &rows[i]) <= 0
	}
	if sorted {
		return rows
	}
	ordered := make([]*IP, len(rows))
	for i := range rows {
		ordered[i] = &rows[i]
	}
	slices.SortFunc(ordered, compareIPs)
	out := make([]IP, len(rows))
	for i, r := range ordered {
		out[i] = *r
	}
	return out
}

// compareIPs orders rows numerically, IPv4 before IPv6, and text that is
// not an IP last.
func compareIPs(a, b *IP) int {
	switch {
	case a.addr.IsValid() && b.addr.IsValid():
		return a.addr.Compare(b.addr)
	case a.addr.IsValid():
		return -1
	case b.addr.IsValid():
		return 1
	}
	return cmp.Compare(a.IP, b.IP)
}

// readConfig parses the ConfigMap as the daemons do. When it is invalid the
// daemons keep a configuration the plugin cannot see: every address is then
// treated as inside a range, so that named IPs are still shown with their
// locks, but without interface and prefix.
func readConfig(st *Status, s snapshot, reserved map[netip.Addr]string) (config.Config, bool) {
	st.Config = Config{Name: s.configMap, Warnings: []string{}, Ranges: []string{}}
	if s.cm == nil {
		cfg := config.Default()
		st.Config.Policy = string(cfg.Policy)
		return cfg, true
	}
	st.Config.Found = true
	cfg, err := config.Parse(s.cm.Data)
	if err == nil {
		err = cfg.CheckReserved(reserved)
	}
	st.Config.Warnings = append(st.Config.Warnings, cfg.Warnings...)
	if err != nil {
		st.Config.Error = err.Error()
		return everything(), false
	}
	st.Config.Policy = string(cfg.Policy)
	for _, r := range cfg.Ranges {
		st.Config.Ranges = append(st.Config.Ranges, r.Text)
	}
	return cfg, true
}

// everything is a configuration whose ranges hold every address.
func everything() config.Config {
	cfg := config.Default()
	cfg.NodeSelector = nil
	cfg.Ranges = []config.Range{
		{First: netip.IPv4Unspecified(), Last: netip.AddrFrom4([4]byte{255, 255, 255, 255})},
		{First: netip.IPv6Unspecified(), Last: netip.AddrFrom16([16]byte{0: 255, 1: 255, 2: 255, 3: 255, 4: 255, 5: 255, 6: 255, 7: 255, 8: 255, 9: 255, 10: 255, 11: 255, 12: 255, 13: 255, 14: 255, 15: 255})},
	}
	return cfg
}

// readLeases sorts eip's Leases into heartbeats and locks, adding the
// locks to those parsed already (by IP: a valid lock's name is that of its
// IP). A damaged lock (garbage annotations) is kept by name: the daemons
// still honour its holder for the IP its name belongs to.
func readLeases(st *Status, leases []*coordinationv1.Lease, locks map[netip.Addr]*lease.Lock) (map[string]lease.Heartbeat, map[netip.Addr]*lease.Lock, map[string]*coordinationv1.Lease) {
	heartbeats := map[string]lease.Heartbeat{}
	if locks == nil {
		locks = make(map[netip.Addr]*lease.Lock, len(leases))
	}
	damaged := map[string]*coordinationv1.Lease{}
	for _, l := range leases {
		if l.Labels[lease.ManagedByLabel] != lease.ManagedBy {
			continue
		}
		switch l.Labels[lease.RoleLabel] {
		case lease.RoleHeartbeat:
			hb, err := lease.ParseHeartbeat(l)
			if err != nil {
				st.Warnings = append(st.Warnings, err.Error())
				if hb.Node == "" {
					continue
				}
			}
			heartbeats[hb.Node] = hb
		case lease.RoleLock:
			lk, err := lease.ParseLock(l)
			if err != nil {
				st.Warnings = append(st.Warnings, err.Error())
				damaged[l.Name] = l
				continue
			}
			locks[lk.IP] = &lk
		}
	}
	return heartbeats, locks, damaged
}

// lockFor returns the lock of ip, or a damaged Lease by the lock's name read
// as the daemons read it (holder and move target only), or nil.
func lockFor(ip netip.Addr, locks map[netip.Addr]*lease.Lock, damaged map[string]*coordinationv1.Lease) *lease.Lock {
	if lk, ok := locks[ip]; ok || len(damaged) == 0 {
		return lk
	}
	name := lease.NameFor(ip)
	l, ok := damaged[name]
	if !ok {
		return nil
	}
	lk := lease.Lock{Name: name, IP: ip, MoveTo: l.Annotations[lease.AnnotationMoveTo], Successor: l.Annotations[lease.AnnotationSuccessor], ResourceVersion: l.ResourceVersion}
	if h := l.Spec.HolderIdentity; h != nil {
		lk.Holder = *h
	}
	return &lk
}

func fillLock(r *IP, lk *lease.Lock, nodes map[string]*Node) {
	if lk == nil {
		return
	}
	r.Lock, r.Holder, r.MoveTo, r.Successor, r.Moves = lk.Name, lk.Holder, lk.MoveTo, lk.Successor, lk.Moves
	if !lk.MovedAt.IsZero() {
		t := lk.MovedAt.UTC()
		r.LastMoveTime = &t
	}
	if n := nodes[lk.Holder]; n != nil {
		r.HolderAlive = n.Alive
	}
}

// buildNodes describes every node with a heartbeat, and every holder
// without one.
func buildNodes(heartbeats map[string]lease.Heartbeat, locks map[netip.Addr]*lease.Lock, damaged map[string]*coordinationv1.Lease,
	objs map[string]*corev1.Node, cfg config.Config, known bool, now time.Time) map[string]*Node {
	nodes := map[string]*Node{}
	for name, hb := range heartbeats {
		n := &Node{Name: name, heartbeat: true, Error: hb.Error, Bound: hb.Held, LeaseDurationSeconds: int(hb.Duration / time.Second),
			BGPSessions: lease.ParseBGPSessions(hb.BGP), MACs: lease.ParseMACs(hb.MACs),
			conflicts: lease.ParseAnswers(hb.Conflicts), claims: lease.ParseAnswers(hb.Claims), wire: readWire(hb)}
		if n.MACs == nil {
			n.MACs = []string{}
		}
		if n.BGPSessions == nil {
			n.BGPSessions = []lease.BGPSession{}
		}
		if !hb.RenewTime.IsZero() {
			t := hb.RenewTime.UTC()
			n.LastRenewTime = &t
		}
		n.Alive = alive(hb, now)
		n.Eligible, n.Reason = nodeEligible(hb, objs[name], cfg, known)
		nodes[name] = n
	}
	holder := func(h string) {
		if h == "" {
			return
		}
		n, ok := nodes[h]
		if !ok {
			n = &Node{Name: h, Reason: "no heartbeat: its daemon is not running", BGPSessions: []lease.BGPSession{}, MACs: []string{}}
			nodes[h] = n
		}
		n.Holds++
	}
	for _, lk := range locks {
		holder(lk.Holder)
	}
	for _, l := range damaged {
		if h := l.Spec.HolderIdentity; h != nil {
			holder(*h)
		}
	}
	return nodes
}

// alive: the heartbeat was renewed within its lease duration as of now.
func alive(hb lease.Heartbeat, now time.Time) bool {
	return hb.Duration > 0 && !hb.RenewTime.IsZero() && now.Sub(hb.RenewTime) <= hb.Duration
}

// nodeEligible says whether a node with a heartbeat may hold IPs: its
// daemon says so and the Node passes the daemons' own checks.
func nodeEligible(hb lease.Heartbeat, n *corev1.Node, cfg config.Config, known bool) (bool, string) {
	if !hb.Eligible {
		return false, "its daemon cannot serve IPs"
	}
	selector := cfg.NodeSelector
	if !known {
		selector = nil
	}
	return policy.NodeEligible(n, selector)
}

// filterIPs keeps the rows of want, in want's order, and reports the IPs
// that have no row.
func filterIPs(st Status, want []netip.Addr) (Status, error) {
	if len(want) == 0 {
		return st, nil
	}
	index := make(map[netip.Addr]IP, len(st.IPs))
	for _, r := range st.IPs {
		if r.addr.IsValid() {
			index[r.addr] = r
		}
	}
	out := st
	out.IPs = []IP{}
	var errs error
	seen := map[netip.Addr]bool{}
	for _, ip := range want {
		if seen[ip] {
			continue
		}
		seen[ip] = true
		r, ok := index[ip]
		if !ok {
			errs = errors.Join(errs, notManaged(ip))
			continue
		}
		out.IPs = append(out.IPs, r)
	}
	return out, errs
}

func notManaged(ip netip.Addr) error {
	return fmt.Errorf("%s is not managed by eip: no Service names it and it has no lock", ip)
}
