package config

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Policy says how IPs are spread over nodes.
type Policy string

const (
	// PolicySticky keeps an IP on its live holder.
	PolicySticky Policy = "sticky"
	// PolicySpread balances IPs evenly over live eligible nodes.
	PolicySpread Policy = "spread"
)

// APILoss says what a node does with its IPs while it cannot reach the API server.
type APILoss string

const (
	// APILossHold keeps serving, watching the wire for a new holder.
	APILossHold APILoss = "hold"
	// APILossFence unbinds everything after Config.FenceAfter.
	APILossFence APILoss = "fence"
)

// ClassMode says which LoadBalancer Services eip serves, by their
// spec.loadBalancerClass.
type ClassMode string

const (
	// ClassAny serves LoadBalancer Services without a class and those of
	// eip's class, eip.io/eip.
	ClassAny ClassMode = "any"
	// ClassOnly serves only those of eip's class, and leaves Services
	// without a class to another load balancer.
	ClassOnly ClassMode = "only"
)

// Range is one line of the ranges key.
type Range struct {
	// Name is the optional name=... option, unique across ranges.
	Name string
	// Text is the line as written, without its comment, for messages.
	Text string
	// Line is the 1-based line number within the ranges value.
	Line int
	// First and Last are the inclusive ends, of the same family.
	First, Last netip.Addr
	// Prefix is set when the range was written as a CIDR, else zero.
	Prefix netip.Prefix
	// Bits is the prefix length used when binding an address of this range:
	// the range's netmask option, else the family's default.
	Bits int
	// Iface is the range's iface option, else the global iface; may be "auto".
	Iface string
	// AutoAssign lets LoadBalancer Services be given addresses from this range.
	AutoAssign bool
	// Namespaces are the only namespaces whose Services may use the
	// range's addresses, sorted; nil means every namespace.
	Namespaces []string
	// Announce says whether the range's IPs are announced by ARP/NA, by
	// BGP or both; empty means arp.
	Announce Announce
	// Communities are standard BGP communities attached to its routes.
	Communities []uint32
	// LocalPref is the LOCAL_PREF of its routes (iBGP peers only); 0 means
	// none is sent.
	LocalPref uint32
}

// Contains reports whether ip lies within r. Zoned and IPv4-mapped IPv6
// addresses are never contained.
func (r Range) Contains(ip netip.Addr) bool {
	return ip.Zone() == "" && ip.BitLen() == r.First.BitLen() &&
		r.First.Compare(ip) <= 0 && ip.Compare(r.Last) <= 0
}

// Unusable returns why ip, an address of r, must never be bound, or "" when
// it may be. Only the network and broadcast addresses of an IPv4 range
// written as a CIDR shorter than /31 are unusable: hosts on that subnet treat
// them specially (RFC 919, RFC 3021 for /31).
func (r Range) Unusable(ip netip.Addr) string {
	if !r.Prefix.IsValid() || !r.Prefix.Addr().Is4() || r.Prefix.Bits() >= 31 {
		return ""
	}
	switch ip {
	case r.First:
		return fmt.Sprintf("the network address of range %q", r.Text)
	case r.Last:
		return fmt.Sprintf("the broadcast address of range %q", r.Text)
	}
	return ""
}

// Allows reports whether a Service of namespace ns may use r's addresses.
func (r Range) Allows(ns string) bool {
	return r.Namespaces == nil || slices.Contains(r.Namespaces, ns)
}

// NotFor says why a Service of namespace ns may not use r's addresses, as
// a Rejection reason: "range NAME is only for namespaces a, b".
func (r Range) NotFor(ns string) string {
	name := r.Name
	if name == "" {
		name = strconv.Quote(r.Text)
	}
	return fmt.Sprintf("range %s is only for namespace%s %s, not %s", name, plural(len(r.Namespaces)), strings.Join(r.Namespaces, ", "), ns)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// String returns the range as written.
func (r Range) String() string { return r.Text }

// Addresses returns the range's addresses as written without options: a
// CIDR, a first-last span, or one address.
func (r Range) Addresses() string {
	switch {
	case r.Prefix.IsValid():
		return r.Prefix.String()
	case r.First == r.Last:
		return r.First.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// Label names the range in metrics and tables: its name, else its
// addresses.
func (r Range) Label() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Addresses()
}

// Size is how many addresses r holds, at most math.MaxUint64 (an IPv6 range
// of a /64 or more saturates).
func (r Range) Size() uint64 {
	f, l := r.First.As16(), r.Last.As16()
	fHi, fLo := binary.BigEndian.Uint64(f[:8]), binary.BigEndian.Uint64(f[8:])
	lHi, lLo := binary.BigEndian.Uint64(l[:8]), binary.BigEndian.Uint64(l[8:])
	lo, borrow := bits.Sub64(lLo, fLo, 0)
	if lHi-fHi-borrow != 0 || lo == math.MaxUint64 {
		return math.MaxUint64
	}
	return lo + 1
}

// sameEffect reports whether r and o bind the same addresses the same way.
func (r Range) sameEffect(o Range) bool {
	return r.Name == o.Name && r.First == o.First && r.Last == o.Last && r.Prefix == o.Prefix &&
		r.Bits == o.Bits && r.Iface == o.Iface && r.AutoAssign == o.AutoAssign && slices.Equal(r.Namespaces, o.Namespaces) &&
		r.Announce == o.Announce && slices.Equal(r.Communities, o.Communities) && r.LocalPref == o.LocalPref
}

// Config is the validated content of the eip-config ConfigMap.
type Config struct {
	// Iface is an interface name or "auto".
	Iface string
	// Netmask4 is the default prefix length for binding IPv4 addresses.
	Netmask4 int
	// Netmask6 is the default prefix length for binding IPv6 addresses.
	Netmask6 int
	// Policy spreads or keeps IPs.
	Policy Policy
	// NodeSelector selects eligible nodes. Nodes labelled
	// node.kubernetes.io/exclude-from-external-load-balancers are excluded
	// by the agent whatever the selector says.
	NodeSelector labels.Selector
	// LeaseDuration is how long a node's heartbeat may stay unchanged before
	// peers judge the node dead.
	LeaseDuration time.Duration
	// RenewInterval is how often a node renews its heartbeat.
	RenewInterval time.Duration
	// APILoss is what a node does when it cannot reach the API server.
	APILoss APILoss
	// FenceAfter is, with APILossFence, how long after its last successful
	// renewal was sent a node unbinds everything.
	FenceAfter time.Duration
	// LivenessPort is the UDP port on which eipds tell each other they are
	// alive (docs/design.md, Liveness over the LAN); 0 when off, and then
	// liveness is judged from the heartbeat Leases alone.
	LivenessPort uint16
	// HeartbeatWrites is, while liveness goes over the LAN, how many
	// heartbeat writes a second all nodes together make at most in steady
	// state: each node renews its heartbeat every
	// SlowFactor(nodes) renew intervals.
	HeartbeatWrites float64
	// AnnounceInterval is how often every IP a node holds and announces
	// on the LAN is announced again, spread over the interval, for
	// routers that ignore gratuitous ARP and keep an entry until it ages
	// out; 0 when off (the default): announced only when bound.
	AnnounceInterval time.Duration
	// ExternalIPs says whether spec.externalIPs are managed; when false,
	// only the load-balancer addresses of LoadBalancer Services are.
	ExternalIPs bool
	// PortFilter says whether eipd filters traffic to its addresses down
	// to their Services' ports (netif.PortFilter).
	PortFilter bool
	// Caps bound the addresses Services may name.
	Caps Caps
	// LoadBalancerClass says whether LoadBalancer Services without a
	// spec.loadBalancerClass are eip's. It does not touch spec.externalIPs,
	// which have no class: ExternalIPs decides for them.
	LoadBalancerClass ClassMode
	// PreferredNodes are node names in order of preference.
	PreferredNodes []string
	// Ranges are the address ranges eip may bind, sorted by First (IPv4
	// before IPv6), never overlapping.
	Ranges []Range
	// BGP configures the speaker of route mode.
	BGP BGP
	// Warnings are non-fatal findings, such as unknown keys.
	Warnings []string
}

// Default returns the configuration used when the ConfigMap is empty or
// missing. It has no ranges, so nothing is bound.
func Default() Config {
	const lease = 2 * time.Second
	return Config{
		Iface:         "auto",
		Netmask4:      32,
		Netmask6:      128,
		Policy:        PolicySticky,
		NodeSelector:  labels.Everything(),
		LeaseDuration: lease,
		RenewInterval: 500 * time.Millisecond,
		APILoss:       APILossHold,
		FenceAfter:    defaultFenceAfter(lease),
		LivenessPort:  DefaultLivenessPort,
		ExternalIPs:   true,
		PortFilter:    true,
		Caps:          Caps{PerService: DefaultMaxIPsPerService},

		LoadBalancerClass: ClassAny,

		HeartbeatWrites: DefaultHeartbeatWrites,
	}
}

// Caps bound how many addresses Services may name, 0 meaning no bound:
// every eipd keeps a lock, and binds, each address a Service names, so
// whoever may create Services could otherwise make every node hold tens of
// thousands. Package ipset applies them in the order of ownership.
type Caps struct {
	// PerService is how many addresses one Service may name
	// (max-ips-per-service), counted in the order the Service names them.
	PerService int
	// PerNamespace is how many the Services of one namespace may name
	// together (max-ips-per-namespace), counted in the order of ownership:
	// the addresses' recorded owners first, then older Services.
	PerNamespace int
}

// DefaultMaxIPsPerService is the default of Caps.PerService: far more
// than a Service needs (one address a family, a few more for
// spec.externalIPs), far fewer than a tenant could ask for.
const DefaultMaxIPsPerService = 64

// DefaultHeartbeatWrites is the default of HeartbeatWrites. Every eipd
// receives every heartbeat write through its watch, so the watch events the
// API server sends are nodes times this: 200/s at fifty nodes.
const DefaultHeartbeatWrites = 4

// minSlowFactor: while liveness goes over the LAN, a heartbeat is renewed
// at least ten times less often than renew-interval, however few the nodes.
const minSlowFactor = 10

// SlowFactor is how many renew intervals a heartbeat lasts, renewed once per
// that many, while liveness goes over the LAN among nodes nodes: ten, or
// enough that the nodes together write HeartbeatWrites heartbeats a second.
// Writes then stop growing with nodes, and the watch events (one per write
// and node) grow with nodes, not nodes². The trade: a heartbeat lasts as
// many lease durations, which is how long `kubectl eip status` shows a
// node that died as alive.
func (c Config) SlowFactor(nodes int) int {
	perInterval := c.HeartbeatWrites * c.RenewInterval.Seconds()
	if perInterval <= 0 {
		return minSlowFactor
	}
	return max(minSlowFactor, int(math.Ceil(float64(nodes)/perInterval-1e-9)))
}

// DefaultLivenessPort is the UDP port of liveness over the LAN, next to the
// metrics port (9402).
const DefaultLivenessPort = 9403

// LANLiveness reports whether peers' liveness is carried over the LAN: a
// liveness port is set and api-loss is hold. Fencing is timed against the
// last renewal sent, so with api-loss=fence heartbeats stay the only
// liveness, renewed every renew-interval.
func (c Config) LANLiveness() bool { return c.LivenessPort != 0 && c.APILoss == APILossHold }

func defaultFenceAfter(lease time.Duration) time.Duration { return lease / 4 * 3 }

// Binding is how an address is bound.
type Binding struct {
	// Range is the range holding the address; it points into Config.Ranges.
	Range *Range
	// Iface is the interface name, or "auto".
	Iface string
	// Bits is the prefix length given to the kernel.
	Bits int
	// Announce is the range's announce mode.
	Announce Announce
}

// Prefix returns ip with the binding's prefix length, as given to the kernel.
func (b Binding) Prefix(ip netip.Addr) netip.Prefix { return netip.PrefixFrom(ip, b.Bits) }

// Equal reports whether b and o put an address on the same interface with the
// same prefix length: what the kernel sees. The ranges themselves are not
// compared, so that Bindings from two Configs can be compared; the announce
// mode is, since it decides whether the LAN or the routers are told.
func (b Binding) Equal(o Binding) bool {
	return b.Iface == o.Iface && b.Bits == o.Bits && b.Announce == o.Announce
}

// Lookup finds the range containing ip and how ip is bound; ok is false when
// ip lies outside every range.
func (c Config) Lookup(ip netip.Addr) (b Binding, ok bool) {
	i := sort.Search(len(c.Ranges), func(i int) bool { return c.Ranges[i].Last.Compare(ip) >= 0 })
	if i == len(c.Ranges) || !c.Ranges[i].Contains(ip) {
		return Binding{}, false
	}
	r := &c.Ranges[i]
	return Binding{Range: r, Iface: r.Iface, Bits: r.Bits, Announce: r.Announce}, true
}

// AddressLifetime is the kernel valid and preferred lifetime of a bound
// address: LeaseDuration-RenewInterval truncated to whole seconds (the
// kernel counts in seconds), at least 1s. An address not refreshed by a live
// eipd thus disappears about when peers may judge its node dead.
func (c Config) AddressLifetime() time.Duration {
	return max(time.Second, (c.LeaseDuration - c.RenewInterval).Truncate(time.Second))
}

// RankStep is the delay per rank before a node tries to acquire a free IP:
// RenewInterval/2 clamped to [50ms, 250ms]. The top-ranked live node tries at
// once; the next one only if the first has not succeeded a step later. 50ms
// is well above an API round trip on a healthy cluster, so the ranks rarely
// collide (a collision costs a conflict and a re-read, never a double
// holder); 250ms keeps a failover whose top-ranked survivor is itself slow
// within lease-duration + 0.5s, the failover target.
func (c Config) RankStep() time.Duration {
	return min(max(c.RenewInterval/2, 50*time.Millisecond), 250*time.Millisecond)
}

// Equal reports whether c and o have the same effect. Warnings and the
// text, line numbers and order of ranges are ignored.
func (c Config) Equal(o Config) bool {
	return c.Iface == o.Iface && c.Netmask4 == o.Netmask4 && c.Netmask6 == o.Netmask6 &&
		c.Policy == o.Policy && selectorString(c.NodeSelector) == selectorString(o.NodeSelector) &&
		c.LeaseDuration == o.LeaseDuration && c.RenewInterval == o.RenewInterval &&
		c.APILoss == o.APILoss && c.FenceAfter == o.FenceAfter && c.LivenessPort == o.LivenessPort && c.HeartbeatWrites == o.HeartbeatWrites &&
		c.AnnounceInterval == o.AnnounceInterval &&
		c.ExternalIPs == o.ExternalIPs && c.PortFilter == o.PortFilter && c.Caps == o.Caps && c.LoadBalancerClass == o.LoadBalancerClass && slices.Equal(c.PreferredNodes, o.PreferredNodes) &&
		slices.EqualFunc(c.Ranges, o.Ranges, Range.sameEffect) && c.BGP.Equal(o.BGP)
}

func selectorString(s labels.Selector) string {
	if s == nil {
		return "<nil>"
	}
	return s.String()
}

// CheckReserved returns an error for every address of reserved (the nodes'
// and the API server's own addresses, each mapped to what it is, as
// NodeAddress and APIServerAddress word it) that lies inside a range: a
// Service naming it could otherwise make eip answer for a node or cut every
// node off its control plane. Addresses are checked in order, so the
// message is stable.
func (c Config) CheckReserved(reserved map[netip.Addr]string) error {
	addrs := make([]netip.Addr, 0, len(reserved))
	for a := range reserved {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	var errs error
	for _, a := range addrs {
		if b, ok := c.Lookup(a); ok {
			errs = errors.Join(errs, fmt.Errorf("ranges line %d %q contains %s, %s",
				b.Range.Line, b.Range.Text, a, reserved[a]))
		}
	}
	return errs
}

// APIServerAddress describes a reserved address of the API server: one
// eipd connects to, or an endpoint of the kubernetes Service in default.
// Binding it on a node would point every node's traffic to the API server
// at that node.
const APIServerAddress = "an address of the API server"

// NodeAddress describes a reserved address owned by node, so that every
// package words it the same way.
func NodeAddress(node string) string {
	if node == "" {
		return "a node's own address"
	}
	return fmt.Sprintf("the address of node %q", node)
}
