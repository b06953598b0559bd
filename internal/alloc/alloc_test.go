package alloc_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
)

// The ranges every test allocates from: lan4 and lan6 auto-assign, the
// others only on request.
const ranges = `
198.18.10.0/29 name=lan4 auto-assign
198.18.20.1-198.18.20.3 name=fixed
198.18.30.0/30 name=small auto-assign=false
2001:db8::10:0/126 name=lan6 auto-assign
2001:db8::20:0/127 name=fixed6
`

func testConfig(t *testing.T, text string) config.Config {
	t.Helper()
	cfg, err := config.Parse(map[string]string{"ranges": text})
	assert.NilError(t, err)
	return cfg
}

type option func(*corev1.Service)

func svc(nsName string, opts ...option) *corev1.Service {
	ns, name, _ := strings.Cut(nsName, "/")
	single := corev1.IPFamilyPolicySingleStack
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeLoadBalancer,
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy: &single,
			Ports:          []corev1.ServicePort{{Port: 80}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func annotate(k, v string) option { return func(s *corev1.Service) { s.Annotations[k] = v } }
func lbIP(ip string) option       { return func(s *corev1.Service) { s.Spec.LoadBalancerIP = ip } }
func external(ips ...string) option {
	return func(s *corev1.Service) { s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, ips...) }
}

func status(ips ...string) option {
	return func(s *corev1.Service) {
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

func ports(ps ...int32) option {
	return func(s *corev1.Service) {
		s.Spec.Ports = nil
		for _, p := range ps {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: p})
		}
	}
}

func families(policy corev1.IPFamilyPolicy, fs ...corev1.IPFamily) option {
	return func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &policy
		s.Spec.IPFamilies = fs
	}
}

func dual(policy corev1.IPFamilyPolicy) option {
	return families(policy, corev1.IPv4Protocol, corev1.IPv6Protocol)
}

func ips(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestRequestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want alloc.Request
		err  string
	}{
		{
			name: "single stack",
			svc:  svc("ns/a"),
			want: alloc.Request{Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv4Protocol}, Ports: []alloc.Port{{Protocol: corev1.ProtocolTCP, Port: 80}}},
		},
		{
			name: "require dual stack, IPv6 first",
			svc:  svc("ns/a", families(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol), ports()),
			want: alloc.Request{Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, RequireAll: true},
		},
		{
			name: "prefer dual stack",
			svc:  svc("ns/a", dual(corev1.IPFamilyPolicyPreferDualStack), ports()),
			want: alloc.Request{Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}},
		},
		{
			name: "annotations",
			svc: svc("ns/a", dual(corev1.IPFamilyPolicyPreferDualStack), ports(),
				annotate(alloc.AnnotationIPs, " 2001:db8::20:1, 198.18.20.2"), annotate(alloc.AnnotationRange, "fixed,fixed6"),
				annotate(alloc.AnnotationSharingKey, "k")),
			want: alloc.Request{
				Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
				IPs: ips("2001:db8::20:1", "198.18.20.2"), Ranges: []string{"fixed", "fixed6"}, SharingKey: "k",
			},
		},
		{
			name: "loadBalancerIP",
			svc:  svc("ns/a", lbIP("198.18.20.2"), ports()),
			want: alloc.Request{Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv4Protocol}, IPs: ips("198.18.20.2")},
		},
		{
			name: "loadBalancerIP agreeing with the annotation",
			svc:  svc("ns/a", lbIP("198.18.20.2"), annotate(alloc.AnnotationIPs, "198.18.20.2"), ports()),
			want: alloc.Request{Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv4Protocol}, IPs: ips("198.18.20.2")},
		},
		{
			name: "no ipFamilies: the requested address decides",
			svc:  svc("ns/a", families(corev1.IPFamilyPolicySingleStack), lbIP("2001:db8::20:1"), ports()),
			want: alloc.Request{Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv6Protocol}, IPs: ips("2001:db8::20:1")},
		},
		{
			name: "ports default to TCP and keep their protocol",
			svc: svc("ns/a", func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}, {Port: 53}}
			}),
			want: alloc.Request{Service: "ns/a", Families: []corev1.IPFamily{corev1.IPv4Protocol},
				Ports: []alloc.Port{{Protocol: corev1.ProtocolUDP, Port: 53}, {Protocol: corev1.ProtocolTCP, Port: 53}}},
		},
		{name: "garbage annotation", svc: svc("ns/a", annotate(alloc.AnnotationIPs, "198.18.20.x")), err: `"198.18.20.x" is not an IP address`},
		{name: "garbage loadBalancerIP", svc: svc("ns/a", lbIP("nope")), err: `spec.loadBalancerIP "nope" is not an IP address`},
		{name: "two of one family", svc: svc("ns/a", annotate(alloc.AnnotationIPs, "198.18.20.1,198.18.20.2")), err: "at most one address per family"},
		{name: "disagreeing fields", svc: svc("ns/a", lbIP("198.18.20.1"), annotate(alloc.AnnotationIPs, "198.18.20.2")), err: "not among annotation"},
		{name: "family the Service does not have", svc: svc("ns/a", lbIP("2001:db8::20:1")), err: "is IPv6, but the Service's IP families are [IPv4]"},
		{name: "second family of a single-stack Service", svc: svc("ns/a", families(corev1.IPFamilyPolicySingleStack, corev1.IPv4Protocol, corev1.IPv6Protocol), annotate(alloc.AnnotationIPs, "198.18.20.1,2001:db8::20:1")), err: "IP families are [IPv4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := alloc.RequestOf(ipset.ServiceOf(tc.svc))
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			assert.NilError(t, err)
			assert.DeepEqual(t, got, tc.want, cmpopts.EquateComparable(netip.Addr{}))
		})
	}
}

// world is what a Space is built from in a test.
type world struct {
	services []*corev1.Service
	locks    map[string]string // address -> reserved for
	nodes    []string          // the nodes' own addresses
}

// reserved is the nodes' own addresses, each mapped to its node.
func (w world) reserved() map[netip.Addr]string {
	reserved := map[netip.Addr]string{}
	for i, a := range w.nodes {
		reserved[netip.MustParseAddr(a)] = config.NodeAddress(fmt.Sprintf("node-%d", i+1))
	}
	return reserved
}

func (w world) space(cfg config.Config) *alloc.Space {
	s := alloc.NewSpace(cfg, w.reserved())
	for _, svc := range w.services {
		s.AddService(ipset.ServiceOf(svc))
	}
	for ip, owner := range w.locks {
		s.Lock(netip.MustParseAddr(ip), owner)
	}
	return s
}

func TestAssign(t *testing.T) {
	cfg := testConfig(t, ranges)
	for _, tc := range []struct {
		name    string
		world   world
		svc     *corev1.Service
		ips     []string // the status to write
		reserve []string // of which new reservations
		refused string   // part of the one refusal
	}{
		{
			name: "first address of an auto-assign range, not the network address",
			svc:  svc("ns/a"), ips: []string{"198.18.10.1"}, reserve: []string{"198.18.10.1"},
		},
		{
			name: "skips addresses used, locked, reserved for others, and the nodes' own",
			world: world{
				services: []*corev1.Service{svc("ns/x", status("198.18.10.1")), svc("ns/y", external("198.18.10.2"))},
				locks:    map[string]string{"198.18.10.3": "", "198.18.10.4": "ns/other"},
				nodes:    []string{"198.18.10.5"},
			},
			svc: svc("ns/a"), ips: []string{"198.18.10.6"}, reserve: []string{"198.18.10.6"},
		},
		{
			name: "another class's status address is not free either",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.10.1"), func(s *corev1.Service) {
				class := "other.io/lb"
				s.Spec.LoadBalancerClass = &class
			})}},
			svc: svc("ns/a"), ips: []string{"198.18.10.2"}, reserve: []string{"198.18.10.2"},
		},
		{
			name:  "never the broadcast address: the range is full",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.10.1", "198.18.10.2", "198.18.10.3", "198.18.10.4", "198.18.10.5", "198.18.10.6"))}},
			svc:   svc("ns/a"), refused: "no free IPv4 address in range lan4",
		},
		{
			name:  "a node's own address in its status is not kept (eip never binds it): a free one replaces it",
			world: world{nodes: []string{"198.18.0.1"}},
			svc:   svc("ns/a", status("198.18.0.1")), ips: []string{"198.18.10.1"}, reserve: []string{"198.18.10.1"},
		},
		{
			name:  "a node's own address, and no range to replace it from",
			world: world{nodes: []string{"198.18.0.1"}},
			svc:   svc("ns/a", status("198.18.0.1"), annotate(alloc.AnnotationRange, "lan6")), refused: "no IPv4 range among the ranges named",
		},
		{
			name:  "its own reservation first",
			world: world{locks: map[string]string{"198.18.10.4": "ns/a", "198.18.10.3": "ns/b"}},
			svc:   svc("ns/a"), ips: []string{"198.18.10.4"},
		},
		{
			name:  "its own reservation, only if it still fits the request",
			world: world{locks: map[string]string{"198.18.10.4": "ns/a"}},
			svc:   svc("ns/a", annotate(alloc.AnnotationRange, "fixed")), ips: []string{"198.18.20.1"}, reserve: []string{"198.18.20.1"},
		},
		{
			name: "a range by name, though not auto-assign",
			svc:  svc("ns/a", annotate(alloc.AnnotationRange, "small")), ips: []string{"198.18.30.1"}, reserve: []string{"198.18.30.1"},
		},
		{
			name: "an unknown range name",
			svc:  svc("ns/a", annotate(alloc.AnnotationRange, "nope")), refused: `no range is named "nope"`,
		},
		{
			name: "a named range of the other family only",
			svc:  svc("ns/a", annotate(alloc.AnnotationRange, "lan6")), refused: "no IPv4 range among the ranges named by annotation eip.io/range (lan6)",
		},
		{
			name: "requested address, outside auto-assign ranges",
			svc:  svc("ns/a", lbIP("198.18.20.3")), ips: []string{"198.18.20.3"}, reserve: []string{"198.18.20.3"},
		},
		{
			name:  "requested address reserved for it: no new reservation",
			world: world{locks: map[string]string{"198.18.20.3": "ns/a"}},
			svc:   svc("ns/a", lbIP("198.18.20.3")), ips: []string{"198.18.20.3"},
		},
		{
			name:  "requested address taken",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.20.3"))}},
			svc:   svc("ns/a", lbIP("198.18.20.3")), refused: "requested address 198.18.20.3: used by ns/x (Services share an address only when both carry annotation eip.io/sharing-key",
		},
		{
			name:  "requested address reserved for another Service",
			world: world{locks: map[string]string{"198.18.20.3": "ns/x"}},
			svc:   svc("ns/a", lbIP("198.18.20.3")), refused: "requested address 198.18.20.3: reserved for ns/x",
		},
		{
			name:  "requested address whose lock is being released",
			world: world{locks: map[string]string{"198.18.20.3": ""}},
			svc:   svc("ns/a", lbIP("198.18.20.3")), refused: "its lock still exists",
		},
		{name: "requested address outside every range", svc: svc("ns/a", lbIP("198.18.99.1")), refused: "requested address 198.18.99.1: outside every configured range"},
		{name: "requested network address", svc: svc("ns/a", lbIP("198.18.10.0")), refused: "the network address of range"},
		{name: "requested broadcast address", svc: svc("ns/a", lbIP("198.18.10.7")), refused: "the broadcast address of range"},
		{name: "requested loopback address", svc: svc("ns/a", lbIP("127.0.0.1")), refused: "a loopback address"},
		{
			name:  "requested node address",
			world: world{nodes: []string{"198.18.20.1"}},
			svc:   svc("ns/a", lbIP("198.18.20.1")), refused: `the address of node "node-1"`,
		},
		{
			name: "requested address outside the named range",
			svc:  svc("ns/a", lbIP("198.18.10.3"), annotate(alloc.AnnotationRange, "fixed")), refused: "outside the ranges named by annotation eip.io/range (fixed)",
		},
		{
			name:  "refused request keeps the current address",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.20.3"))}},
			svc:   svc("ns/a", status("198.18.10.1"), lbIP("198.18.20.3")), ips: []string{"198.18.10.1"}, refused: "used by ns/x",
		},
		{
			name: "changed request moves the address",
			svc:  svc("ns/a", status("198.18.10.1"), lbIP("198.18.20.3")), ips: []string{"198.18.20.3"}, reserve: []string{"198.18.20.3"},
		},
		{
			name: "keeps its address",
			svc:  svc("ns/a", status("198.18.10.5")), ips: []string{"198.18.10.5"},
		},
		{
			name: "keeps an address whose range was removed",
			svc:  svc("ns/a", status("198.18.99.1")), ips: []string{"198.18.99.1"},
		},
		{
			name: "keeps an address of a non-auto-assign range it once asked for",
			svc:  svc("ns/a", status("198.18.20.2")), ips: []string{"198.18.20.2"},
		},
		{
			name: "moves to the range it now names",
			svc:  svc("ns/a", status("198.18.10.1"), annotate(alloc.AnnotationRange, "small")), ips: []string{"198.18.30.1"}, reserve: []string{"198.18.30.1"},
		},
		{
			name:  "keeps its address when the range it now names is full",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.30.1", "198.18.30.2"))}},
			svc:   svc("ns/a", status("198.18.10.1"), annotate(alloc.AnnotationRange, "small")), ips: []string{"198.18.10.1"},
			refused: "keeping 198.18.10.1: no free IPv4 address in range small",
		},
		{
			name: "drops a family it no longer wants",
			svc:  svc("ns/a", status("198.18.10.1", "2001:db8::10:1")), ips: []string{"198.18.10.1"},
		},
		{
			name: "dual stack",
			svc:  svc("ns/a", dual(corev1.IPFamilyPolicyRequireDualStack)), ips: []string{"198.18.10.1", "2001:db8::10:0"}, reserve: []string{"198.18.10.1", "2001:db8::10:0"},
		},
		{
			name: "dual stack adds the missing family",
			svc:  svc("ns/a", dual(corev1.IPFamilyPolicyPreferDualStack), status("198.18.10.3")), ips: []string{"198.18.10.3", "2001:db8::10:0"}, reserve: []string{"2001:db8::10:0"},
		},
		{
			name:  "require dual stack: all or nothing",
			world: world{services: []*corev1.Service{svc("ns/x", status("2001:db8::10:0", "2001:db8::10:1", "2001:db8::10:2", "2001:db8::10:3"))}},
			svc:   svc("ns/a", dual(corev1.IPFamilyPolicyRequireDualStack)), refused: "no free IPv6 address in range lan6",
		},
		{
			name:  "prefer dual stack: what there is, and a warning",
			world: world{services: []*corev1.Service{svc("ns/x", status("2001:db8::10:0", "2001:db8::10:1", "2001:db8::10:2", "2001:db8::10:3"))}},
			svc:   svc("ns/a", dual(corev1.IPFamilyPolicyPreferDualStack)), ips: []string{"198.18.10.1"}, reserve: []string{"198.18.10.1"},
			refused: "no free IPv6 address in range lan6",
		},
		{
			name: "prefer dual stack with ranges of one family named: that family, quietly",
			svc:  svc("ns/a", dual(corev1.IPFamilyPolicyPreferDualStack), annotate(alloc.AnnotationRange, "fixed")), ips: []string{"198.18.20.1"}, reserve: []string{"198.18.20.1"},
		},
		{
			name: "dual stack, one address requested",
			svc:  svc("ns/a", dual(corev1.IPFamilyPolicyRequireDualStack), annotate(alloc.AnnotationIPs, "2001:db8::20:1")), ips: []string{"198.18.10.1", "2001:db8::20:1"},
			reserve: []string{"198.18.10.1", "2001:db8::20:1"},
		},
		{
			name:  "sharing key: joins the address of its key",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.10.4"), ports(443), annotate(alloc.AnnotationSharingKey, "k"))}},
			svc:   svc("ns/a", annotate(alloc.AnnotationSharingKey, "k")), ips: []string{"198.18.10.4"},
		},
		{
			name: "sharing key: a clash takes another address",
			world: world{services: []*corev1.Service{
				svc("ns/x", status("198.18.10.1"), annotate(alloc.AnnotationSharingKey, "k")),
			}},
			svc: svc("ns/a", annotate(alloc.AnnotationSharingKey, "k")), ips: []string{"198.18.10.2"}, reserve: []string{"198.18.10.2"},
		},
		{
			name: "sharing key: requested and ports apart",
			world: world{services: []*corev1.Service{
				svc("ns/x", status("198.18.20.1"), annotate(alloc.AnnotationSharingKey, "k")),
				svc("ns/y", external("198.18.20.1"), ports(8080), annotate(alloc.AnnotationSharingKey, "k")),
			}},
			svc: svc("ns/a", lbIP("198.18.20.1"), ports(443), annotate(alloc.AnnotationSharingKey, "k")), ips: []string{"198.18.20.1"},
		},
		{
			name: "sharing key: requested, ports clash",
			world: world{services: []*corev1.Service{
				svc("ns/x", status("198.18.20.1"), ports(443, 80), annotate(alloc.AnnotationSharingKey, "k")),
			}},
			svc: svc("ns/a", lbIP("198.18.20.1"), annotate(alloc.AnnotationSharingKey, "k")), refused: "port TCP/80 clashes with ns/x, which shares it",
		},
		{
			name: "sharing key: same port, other protocol",
			world: world{services: []*corev1.Service{
				svc("ns/x", status("198.18.20.1"), annotate(alloc.AnnotationSharingKey, "k"), func(s *corev1.Service) {
					s.Spec.Ports = []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolUDP}}
				}),
			}},
			svc: svc("ns/a", lbIP("198.18.20.1"), annotate(alloc.AnnotationSharingKey, "k")), ips: []string{"198.18.20.1"},
		},
		{
			name:  "sharing key: requested, keys differ",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.20.1"), ports(443), annotate(alloc.AnnotationSharingKey, "other"))}},
			svc:   svc("ns/a", lbIP("198.18.20.1"), annotate(alloc.AnnotationSharingKey, "k")), refused: "used by ns/x, whose eip.io/sharing-key differs",
		},
		{
			name:  "sharing key: only one side has it",
			world: world{services: []*corev1.Service{svc("ns/x", status("198.18.20.1"), ports(443))}},
			svc:   svc("ns/a", lbIP("198.18.20.1"), annotate(alloc.AnnotationSharingKey, "k")), refused: "used by ns/x, whose eip.io/sharing-key differs",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertAssign(t, cfg, tc.world, tc.svc, tc.ips, tc.reserve, tc.refused)
		})
	}
}

// A range kept for some namespaces gives no address to a Service of
// another, neither when it asks for none nor by name nor by address.
func TestAssignHonoursRangeNamespaces(t *testing.T) {
	cfg := testConfig(t, `
198.18.10.0/30 name=team-a auto-assign namespaces=team-a
198.18.10.4/30 name=open auto-assign
198.18.20.1-198.18.20.3 name=fixed namespaces=team-a,team-c
`)
	for _, tc := range []struct {
		name         string
		svc          *corev1.Service
		ips, reserve []string
		refused      string
	}{
		{name: "its namespace's range first", svc: svc("team-a/web"), ips: []string{"198.18.10.1"}, reserve: []string{"198.18.10.1"}},
		{name: "another namespace skips it", svc: svc("team-b/web"), ips: []string{"198.18.10.5"}, reserve: []string{"198.18.10.5"}},
		{name: "by name", svc: svc("team-b/web", annotate(alloc.AnnotationRange, "fixed")), refused: "no IPv4 range among the ranges named by annotation eip.io/range (fixed)"},
		{name: "by name, allowed", svc: svc("team-c/web", annotate(alloc.AnnotationRange, "fixed")), ips: []string{"198.18.20.1"}, reserve: []string{"198.18.20.1"}},
		{name: "by address", svc: svc("team-b/web", lbIP("198.18.20.2")), refused: "requested address 198.18.20.2: range fixed is only for namespaces team-a, team-c, not team-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertAssign(t, cfg, world{}, tc.svc, tc.ips, tc.reserve, tc.refused)
		})
	}
}

// assertAssign checks what Assign answers for svc in w: the status ips,
// the reservations, and the one refusal refused is part of (none if "").
func assertAssign(t *testing.T, cfg config.Config, w world, svc *corev1.Service, ips, reserve []string, refused string) {
	t.Helper()
	req, err := alloc.RequestOf(ipset.ServiceOf(svc))
	assert.NilError(t, err)
	current := alloc.Current(ipset.ServiceOf(svc))
	res := w.space(cfg).Assign(req, current)
	assert.DeepEqual(t, strs(res.IPs), ips)
	assert.DeepEqual(t, strs(res.Reserve), reserve)
	if refused == "" {
		assert.Equal(t, len(res.Refused), 0, "refused: %v", res.Refused)
	} else {
		assert.Equal(t, len(res.Refused), 1, "refused: %v", res.Refused)
		assert.Assert(t, strings.Contains(res.Refused[0], refused), "refused: %q", res.Refused[0])
	}
	assert.Equal(t, req.Settled(current, cfg, w.reserved()), !res.Changes(current) && len(res.Refused) == 0 && len(res.Reserve) == 0,
		"Settled agrees with Assign")
}

func strs(ips []netip.Addr) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

// Services assigned one after another in one Space get distinct
// addresses, and once every address is used the next is refused.
func TestAssignInOnePassGivesDistinctAddresses(t *testing.T) {
	cfg := testConfig(t, "198.18.10.0/28 auto-assign\n2001:db8::10:0/124 auto-assign")
	s := alloc.NewSpace(cfg, map[netip.Addr]string{netip.MustParseAddr("198.18.10.3"): config.NodeAddress("node-1")})
	seen := map[netip.Addr]string{}
	for i := range 13 {
		name := fmt.Sprintf("ns/s%d", i)
		req, err := alloc.RequestOf(ipset.ServiceOf(svc(name, dual(corev1.IPFamilyPolicyRequireDualStack))))
		assert.NilError(t, err)
		res := s.Assign(req, nil)
		assert.Equal(t, len(res.Refused), 0, "%s: %v", name, res.Refused)
		assert.Equal(t, len(res.IPs), 2)
		for _, ip := range res.IPs {
			assert.Assert(t, seen[ip] == "", "%s given to %s and %s", ip, seen[ip], name)
			seen[ip] = name
		}
	}
	// 14 usable IPv4 addresses, one of which is a node's.
	req, err := alloc.RequestOf(ipset.ServiceOf(svc("ns/last", dual(corev1.IPFamilyPolicyRequireDualStack))))
	assert.NilError(t, err)
	res := s.Assign(req, nil)
	assert.DeepEqual(t, res.Refused, []string{"no free IPv4 address in range 198.18.10.0/28 auto-assign"})
	assert.Equal(t, len(res.IPs), 0)
}

// Two nodes with the same view compute the same answers whatever the
// order in which they learnt of Services and locks.
func TestAssignIsAFunctionOfTheView(t *testing.T) {
	cfg := testConfig(t, ranges)
	w := world{
		services: []*corev1.Service{svc("ns/x", status("198.18.10.2")), svc("ns/y", external("198.18.10.4"))},
		locks:    map[string]string{"198.18.10.1": "ns/z", "198.18.10.3": ""},
	}
	var first []string
	for range 20 { // map order varies between runs of world.space
		s := w.space(cfg)
		var got []string
		for _, name := range []string{"ns/a", "ns/b", "ns/c"} {
			req, err := alloc.RequestOf(ipset.ServiceOf(svc(name)))
			assert.NilError(t, err)
			got = append(got, strs(s.Assign(req, nil).IPs)...)
		}
		if first == nil {
			first = got
		}
		assert.DeepEqual(t, got, first)
	}
	assert.DeepEqual(t, first, []string{"198.18.10.5", "198.18.10.6"})
}

func TestSettled(t *testing.T) {
	cfg := testConfig(t, ranges)
	v4only := testConfig(t, "198.18.10.0/29 name=lan4 auto-assign")
	for _, tc := range []struct {
		name string
		cfg  config.Config
		svc  *corev1.Service
		want bool
	}{
		{"has its address", cfg, svc("ns/a", status("198.18.10.1")), true},
		{"has nothing", cfg, svc("ns/a"), false},
		{"out of range, kept", cfg, svc("ns/a", status("198.18.99.1")), true},
		{"a node's own address", cfg, svc("ns/a", status("198.18.0.1")), false},
		{"two of one family", cfg, svc("ns/a", status("198.18.10.1", "198.18.10.2")), false},
		{"a family it does not want", cfg, svc("ns/a", status("198.18.10.1", "2001:db8::10:1")), false},
		{"requests another", cfg, svc("ns/a", status("198.18.10.1"), lbIP("198.18.20.1")), false},
		{"requests what it has", cfg, svc("ns/a", status("198.18.20.1"), lbIP("198.18.20.1")), true},
		{"names another range", cfg, svc("ns/a", status("198.18.10.1"), annotate(alloc.AnnotationRange, "fixed")), false},
		{"names its range", cfg, svc("ns/a", status("198.18.20.1"), annotate(alloc.AnnotationRange, "fixed")), true},
		{"prefer dual stack, one family missing", cfg, svc("ns/a", status("198.18.10.1"), dual(corev1.IPFamilyPolicyPreferDualStack)), false},
		{"prefer dual stack, no range of the missing family", v4only, svc("ns/a", status("198.18.10.1"), dual(corev1.IPFamilyPolicyPreferDualStack)), true},
		{"require dual stack, no range of the missing family", v4only, svc("ns/a", status("198.18.10.1"), dual(corev1.IPFamilyPolicyRequireDualStack)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := alloc.RequestOf(ipset.ServiceOf(tc.svc))
			assert.NilError(t, err)
			reserved := map[netip.Addr]string{netip.MustParseAddr("198.18.0.1"): config.NodeAddress("node-1")}
			assert.Equal(t, req.Settled(alloc.Current(ipset.ServiceOf(tc.svc)), tc.cfg, reserved), tc.want)
		})
	}
}

func TestResultChanges(t *testing.T) {
	r := alloc.Result{IPs: ips("198.18.10.1", "2001:db8::1")}
	assert.Assert(t, !r.Changes(ips("2001:db8::1", "198.18.10.1")), "order does not matter")
	assert.Assert(t, r.Changes(ips("198.18.10.1")))
	assert.Assert(t, alloc.Result{}.Changes(ips("198.18.10.1")))
}

func TestWants(t *testing.T) {
	other := "other.io/lb"
	ours := "eip.io/eip"
	now := metav1.Now()
	for _, tc := range []struct {
		name          string
		svc           *corev1.Service
		any, onlyOurs bool // under load-balancer-class any and only
	}{
		{"LoadBalancer without class", svc("ns/a"), true, false},
		{"LoadBalancer of eip's class", svc("ns/a", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &ours }), true, true},
		{"LoadBalancer of another class", svc("ns/a", func(s *corev1.Service) { s.Spec.LoadBalancerClass = &other }), false, false},
		{"ClusterIP", svc("ns/a", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }), false, false},
		{"being deleted", svc("ns/a", func(s *corev1.Service) { s.DeletionTimestamp = &now }), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Check(t, is.Equal(alloc.Wants(ipset.ServiceOf(tc.svc), config.ClassAny), tc.any), "any")
			assert.Check(t, is.Equal(alloc.Wants(ipset.ServiceOf(tc.svc), config.ClassOnly), tc.onlyOurs), "only")
		})
	}
}
