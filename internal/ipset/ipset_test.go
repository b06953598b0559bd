package ipset_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
)

const ranges = `
198.18.0.0/24 name=lan
198.18.1.0/31 iface=eth1
198.18.2.10-198.18.2.20 netmask=24 iface=eth2
2001:db8::/120 name=v6 netmask=64
`

type option func(*corev1.Service)

func service(nsName string, opts ...option) *corev1.Service {
	ns, name, _ := strings.Cut(nsName, "/")
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func externalIPs(ips ...string) option {
	return func(s *corev1.Service) { s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, ips...) }
}

// loadBalancer makes s of type LoadBalancer with the given class ("" for
// none) and status ingress IPs.
func loadBalancer(class string, ips ...string) option {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		if class != "" {
			s.Spec.LoadBalancerClass = &class
		}
		ingress(ips...)(s)
	}
}

// ingress sets status ingress IPs without touching the type.
func ingress(ips ...string) option {
	return func(s *corev1.Service) {
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

// entry is an Entry in a form that is easy to write and compare.
type entry struct {
	IP       string
	Services []string
	Range    string
	Iface    string
	Bits     int
}

func flatten(es []ipset.Entry) []entry {
	var out []entry
	for _, e := range es {
		out = append(out, entry{IP: e.IP.String(), Services: e.Services, Range: e.Binding.Range.Text, Iface: e.Binding.Iface, Bits: e.Binding.Bits})
	}
	return out
}

func mustParse(t testing.TB, data map[string]string) config.Config {
	t.Helper()
	c, err := config.Parse(data)
	assert.NilError(t, err)
	return c
}

func TestCompute(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": ranges, "iface": "eth0"})
	lan := func(ip string, svcs ...string) entry {
		return entry{IP: ip, Services: svcs, Range: "198.18.0.0/24 name=lan", Iface: "eth0", Bits: 32}
	}
	v6 := func(ip string, svcs ...string) entry {
		return entry{IP: ip, Services: svcs, Range: "2001:db8::/120 name=v6 netmask=64", Iface: "eth0", Bits: 64}
	}
	reserved := map[netip.Addr]string{netip.MustParseAddr("198.18.0.250"): config.NodeAddress("node-a"), netip.MustParseAddr("2001:db8::aa"): config.NodeAddress("node-b")}
	tests := []struct {
		name       string
		services   []*corev1.Service
		want       []entry
		rejections []ipset.Rejection
	}{
		{name: "nothing"},
		{
			name:     "external IPs of any type",
			services: []*corev1.Service{service("a/web", externalIPs("198.18.0.5", "198.18.0.6")), service("b/np", externalIPs("198.18.0.7"), func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })},
			want:     []entry{lan("198.18.0.5", "a/web"), lan("198.18.0.6", "a/web"), lan("198.18.0.7", "b/np")},
		},
		{
			name: "load balancer ingress by class",
			services: []*corev1.Service{
				service("a/no-class", loadBalancer("", "198.18.0.10")),
				service("a/ours", loadBalancer(ipset.LoadBalancerClass, "198.18.0.11")),
				service("a/other", loadBalancer("metallb.io/metallb", "198.18.0.12")),
				service("a/stale-status", ingress("198.18.0.13")), // no longer a LoadBalancer
				service("a/hostname", loadBalancer(""), func(s *corev1.Service) {
					s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}
				}),
				service("a/pending", loadBalancer("")),
			},
			want: []entry{lan("198.18.0.10", "a/no-class"), lan("198.18.0.11", "a/ours")},
		},
		{
			name: "external IPs of another class still count",
			services: []*corev1.Service{
				service("a/other", loadBalancer("metallb.io/metallb", "198.18.0.12"), externalIPs("198.18.0.14")),
			},
			want: []entry{lan("198.18.0.14", "a/other")},
		},
		{
			name: "one IP, several Services of a namespace",
			services: []*corev1.Service{
				service("a/last", externalIPs("198.18.0.20")),
				service("a/first", externalIPs("198.18.0.20")),
				service("a/lb", loadBalancer("", "198.18.0.20")),
				service("a/both", externalIPs("198.18.0.21", "198.18.0.21"), loadBalancer("", "198.18.0.21")),
			},
			want: []entry{lan("198.18.0.20", "a/first", "a/last", "a/lb"), lan("198.18.0.21", "a/both")},
		},
		{
			name: "IPv6 spellings are one IP",
			services: []*corev1.Service{
				service("a/x", externalIPs("2001:db8::5")),
				service("a/y", externalIPs("2001:DB8:0:0::5")),
				service("a/z", externalIPs("2001:0db8::0005")),
			},
			want: []entry{v6("2001:db8::5", "a/x", "a/y", "a/z")},
		},
		{
			name: "sorted numerically, IPv4 first",
			services: []*corev1.Service{
				service("a/a", externalIPs("2001:db8::10", "198.18.0.100", "2001:db8::9", "198.18.0.9", "198.18.0.10")),
			},
			want: []entry{lan("198.18.0.9", "a/a"), lan("198.18.0.10", "a/a"), lan("198.18.0.100", "a/a"), v6("2001:db8::9", "a/a"), v6("2001:db8::10", "a/a")},
		},
		{
			name: "binding follows the range",
			services: []*corev1.Service{
				service("a/a", externalIPs("198.18.1.0", "198.18.1.1", "198.18.2.10", "198.18.2.20")),
			},
			want: []entry{
				{IP: "198.18.1.0", Services: []string{"a/a"}, Range: "198.18.1.0/31 iface=eth1", Iface: "eth1", Bits: 32},
				{IP: "198.18.1.1", Services: []string{"a/a"}, Range: "198.18.1.0/31 iface=eth1", Iface: "eth1", Bits: 32},
				{IP: "198.18.2.10", Services: []string{"a/a"}, Range: "198.18.2.10-198.18.2.20 netmask=24 iface=eth2", Iface: "eth2", Bits: 24},
				{IP: "198.18.2.20", Services: []string{"a/a"}, Range: "198.18.2.10-198.18.2.20 netmask=24 iface=eth2", Iface: "eth2", Bits: 24},
			},
		},
		{
			name: "outside every range",
			services: []*corev1.Service{
				service("a/gw", externalIPs("198.18.3.1", "198.18.0.5")),
				service("a/lb", loadBalancer("", "192.0.2.1")),
				service("a/v6", externalIPs("2001:db8::100", "2001:db8::ff")),
				service("a/edge", externalIPs("198.18.2.9", "198.18.2.21")),
			},
			want: []entry{lan("198.18.0.5", "a/gw"), v6("2001:db8::ff", "a/v6")},
			rejections: []ipset.Rejection{
				{Service: "a/edge", IP: "198.18.2.21", Reason: "outside every configured range"},
				{Service: "a/edge", IP: "198.18.2.9", Reason: "outside every configured range"},
				{Service: "a/gw", IP: "198.18.3.1", Reason: "outside every configured range"},
				{Service: "a/lb", IP: "192.0.2.1", Reason: "outside every configured range"},
				{Service: "a/v6", IP: "2001:db8::100", Reason: "outside every configured range"},
			},
		},
		{
			name: "mapped forms, zones and garbage",
			services: []*corev1.Service{
				service("a/mapped", externalIPs("::ffff:198.18.0.5", "::ffff:c612:6"), loadBalancer("", "::ffff:198.18.0.7")),
				service("a/zone", externalIPs("2001:db8::5%eth0")),
				service("a/bad", externalIPs("198.18.0.300", "", "web.example.com", " 198.18.0.5", "198.18.0.05", "198.18.0.0/24")),
			},
			rejections: []ipset.Rejection{
				{Service: "a/bad", IP: "", Reason: "not a valid IP address"},
				{Service: "a/bad", IP: " 198.18.0.5", Reason: "not a valid IP address"},
				{Service: "a/bad", IP: "198.18.0.0/24", Reason: "not a valid IP address"},
				{Service: "a/bad", IP: "198.18.0.05", Reason: "not a valid IP address"},
				{Service: "a/bad", IP: "198.18.0.300", Reason: "not a valid IP address"},
				{Service: "a/bad", IP: "web.example.com", Reason: "not a valid IP address"},
				{Service: "a/mapped", IP: "::ffff:198.18.0.5", Reason: "an IPv4-mapped IPv6 address (write 198.18.0.5)"},
				{Service: "a/mapped", IP: "::ffff:198.18.0.7", Reason: "an IPv4-mapped IPv6 address (write 198.18.0.7)"},
				{Service: "a/mapped", IP: "::ffff:c612:6", Reason: "an IPv4-mapped IPv6 address (write 198.18.0.6)"},
				{Service: "a/zone", IP: "2001:db8::5%eth0", Reason: "an address with an IPv6 zone"},
			},
		},
		{
			name: "addresses nobody may answer for",
			services: []*corev1.Service{
				service("a/s", externalIPs("0.0.0.0", "127.0.0.1", "224.0.0.1", "169.254.1.1", "255.255.255.255", "::", "::1", "fe80::1", "ff02::1")),
			},
			rejections: []ipset.Rejection{
				{Service: "a/s", IP: "0.0.0.0", Reason: `an address of 0.0.0.0/8 ("this network")`},
				{Service: "a/s", IP: "127.0.0.1", Reason: "a loopback address"},
				{Service: "a/s", IP: "169.254.1.1", Reason: "a link-local address"},
				{Service: "a/s", IP: "224.0.0.1", Reason: "a multicast address"},
				{Service: "a/s", IP: "255.255.255.255", Reason: "the limited broadcast address"},
				{Service: "a/s", IP: "::", Reason: "the unspecified address"},
				{Service: "a/s", IP: "::1", Reason: "a loopback address"},
				{Service: "a/s", IP: "fe80::1", Reason: "a link-local address"},
				{Service: "a/s", IP: "ff02::1", Reason: "a multicast address"},
			},
		},
		{
			name: "network and broadcast of a CIDR range",
			services: []*corev1.Service{
				service("a/net", externalIPs("198.18.0.0")),
				service("a/bcast", loadBalancer("", "198.18.0.255")),
				service("a/ok", externalIPs("198.18.0.1", "198.18.0.254", "2001:db8::", "2001:db8::ff")),
			},
			want: []entry{lan("198.18.0.1", "a/ok"), lan("198.18.0.254", "a/ok"), v6("2001:db8::", "a/ok"), v6("2001:db8::ff", "a/ok")},
			rejections: []ipset.Rejection{
				{Service: "a/bcast", IP: "198.18.0.255", Reason: `the broadcast address of range "198.18.0.0/24 name=lan"`},
				{Service: "a/net", IP: "198.18.0.0", Reason: `the network address of range "198.18.0.0/24 name=lan"`},
			},
		},
		{
			name: "the nodes' own addresses",
			services: []*corev1.Service{
				service("a/steal", externalIPs("198.18.0.250", "2001:db8::aa"), loadBalancer("", "198.18.0.250")),
			},
			rejections: []ipset.Rejection{
				{Service: "a/steal", IP: "198.18.0.250", Reason: `the address of node "node-a"`},
				{Service: "a/steal", IP: "2001:db8::aa", Reason: `the address of node "node-b"`},
			},
		},
		{
			name: "a refused IP does not spoil another Service's good one",
			services: []*corev1.Service{
				service("a/good", externalIPs("198.18.0.30")),
				service("a/bad", externalIPs("::ffff:198.18.0.30")),
			},
			want:       []entry{lan("198.18.0.30", "a/good")},
			rejections: []ipset.Rejection{{Service: "a/bad", IP: "::ffff:198.18.0.30", Reason: "an IPv4-mapped IPv6 address (write 198.18.0.30)"}},
		},
		{
			name:     "nil Services are skipped",
			services: []*corev1.Service{nil, service("a/x", externalIPs("198.18.0.40")), nil},
			want:     []entry{lan("198.18.0.40", "a/x")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			entries, rejections := compute(tc.services, cfg, reserved)
			assert.DeepEqual(t, flatten(entries), tc.want)
			assert.DeepEqual(t, rejections, tc.rejections)
			for _, e := range entries {
				assert.Assert(t, e.Binding.Range.Contains(e.IP), e.IP)
			}
		})
	}
}

func TestComputeNoRanges(t *testing.T) {
	entries, rejections := compute([]*corev1.Service{service("a/x", externalIPs("198.18.0.5"))}, config.Default(), nil)
	assert.Equal(t, len(entries), 0)
	assert.DeepEqual(t, rejections, []ipset.Rejection{{Service: "a/x", IP: "198.18.0.5", Reason: "no ranges are configured"}})
}

func TestComputeBindingPointsIntoConfig(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": ranges})
	entries, _ := compute([]*corev1.Service{service("a/x", externalIPs("2001:db8::1"))}, cfg, nil)
	assert.Equal(t, len(entries), 1)
	assert.Assert(t, entries[0].Binding.Range == &cfg.Ranges[3])
}

// TestComputeOrderIndependent: informers deliver Services in any order; the
// result must not depend on it.
func TestComputeOrderIndependent(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": ranges})
	services := benchServices(300)
	services = append(services,
		service("x/dup1", externalIPs("198.18.0.5", "::ffff:198.18.0.5")),
		service("x/dup2", loadBalancer("", "198.18.0.5", "203.0.113.9")),
		service("y/steal", externalIPs("198.18.0.5"), annotated(ipset.AnnotationPreferredNodes, "node-y")),
		service("x/prefers", externalIPs("198.18.0.5"), annotated(ipset.AnnotationPreferredNodes, "node-x")),
	)
	wantEntries, wantRejections := compute(services, cfg, nil)
	assert.Assert(t, len(wantEntries) > 0 && len(wantRejections) > 0)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		rng.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		entries, rejections := compute(services, cfg, nil)
		assert.DeepEqual(t, flatten(entries), flatten(wantEntries))
		assert.DeepEqual(t, rejections, wantRejections)
	}
}

// Under load-balancer-class only, the addresses of class-less LoadBalancer
// Services are another load balancer's: not managed, and not refused
// either (a refusal would put an Event on a Service that is not eip's),
// while spec.externalIPs, which have no class, stay managed.
func TestComputeClassOnly(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": ranges, "iface": "eth0", "load-balancer-class": "only"})
	lan := func(ip string, svcs ...string) entry {
		return entry{IP: ip, Services: svcs, Range: "198.18.0.0/24 name=lan", Iface: "eth0", Bits: 32}
	}
	entries, rejections := compute([]*corev1.Service{
		service("a/no-class", loadBalancer("", "198.18.0.10")),
		service("a/ours", loadBalancer(ipset.LoadBalancerClass, "198.18.0.11")),
		service("a/no-class-out-of-range", loadBalancer("", "203.0.113.1")),
		service("a/no-class-with-external", loadBalancer("", "198.18.0.12"), externalIPs("198.18.0.13")),
	}, cfg, nil)
	assert.DeepEqual(t, flatten(entries), []entry{lan("198.18.0.11", "a/ours"), lan("198.18.0.13", "a/no-class-with-external")})
	assert.Check(t, is.Len(rejections, 0))
}

func TestIsOurs(t *testing.T) {
	for _, mode := range []config.ClassMode{config.ClassAny, config.ClassOnly} {
		assert.Check(t, is.Equal(ipset.IsOurs(ipset.ServiceOf(service("a/b", loadBalancer(""))), mode), mode == config.ClassAny), mode)
		assert.Check(t, ipset.IsOurs(ipset.ServiceOf(service("a/b", loadBalancer(ipset.LoadBalancerClass))), mode), mode)
		assert.Check(t, !ipset.IsOurs(ipset.ServiceOf(service("a/b", loadBalancer("example.com/other"))), mode), mode)
		assert.Check(t, !ipset.IsOurs(ipset.ServiceOf(service("a/b")), mode), mode)
	}
}

// benchServices returns n Services: most with one external IP of their own,
// every tenth a LoadBalancer with an IPv6 ingress, every fiftieth sharing an
// IP with another, every hundredth naming an IP outside the ranges.
func benchServices(n int) []*corev1.Service {
	out := make([]*corev1.Service, 0, n)
	for i := range n {
		name := fmt.Sprintf("ns-%d/svc-%d", i%50, i)
		var opt option
		switch {
		case i%100 == 99:
			opt = externalIPs(fmt.Sprintf("203.0.113.%d", i%250))
		case i%50 == 49:
			name = fmt.Sprintf("ns-%d/svc-%d", (i-1)%50, i) // shares with the Service before it, of its namespace
			opt = externalIPs(fmt.Sprintf("198.18.%d.%d", 100+(i-1)/250, (i-1)%250+1))
		case i%10 == 9:
			opt = loadBalancer("", fmt.Sprintf("2001:db8:100::%x", i))
		default:
			opt = externalIPs(fmt.Sprintf("198.18.%d.%d", 100+i/250, i%250+1))
		}
		out = append(out, service(name, opt))
	}
	return out
}

func BenchmarkCompute(b *testing.B) {
	cfg := mustParse(b, map[string]string{"ranges": `
		198.18.0.0/24
		198.18.96.0/19 name=bench
		198.18.128.0/22 iface=eth1
		198.19.0.0-198.19.0.255
		2001:db8:100::/104 name=bench6
		2001:db8:200::/120
	`})
	reserved := map[netip.Addr]string{
		netip.MustParseAddr("198.18.0.1"): "node-a", netip.MustParseAddr("198.18.0.2"): "node-b", netip.MustParseAddr("198.18.0.3"): "node-c",
	}
	for _, n := range []int{1000, 5000} {
		services := benchServices(n)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var entries []ipset.Entry
			for b.Loop() {
				entries, _ = compute(services, cfg, reserved)
			}
			b.ReportMetric(float64(len(entries)), "ips")
		})
	}
}

func TestNodeAddresses(t *testing.T) {
	node := func(name string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	got := ipset.NodeAddresses([]*corev1.Node{
		node("n1",
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.18.0.11"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8::11"},
			corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n1"},
		),
		node("n2",
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "::ffff:198.18.0.12"},
			corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: "198.18.0.99"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "not-an-ip"},
		),
	})
	assert.DeepEqual(t, got, map[netip.Addr]string{
		netip.MustParseAddr("198.18.0.11"):  config.NodeAddress("n1"),
		netip.MustParseAddr("2001:db8::11"): config.NodeAddress("n1"),
		netip.MustParseAddr("198.18.0.12"):  config.NodeAddress("n2"),
	})
}

func created(t time.Time) option {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.NewTime(t) }
}

func uid(u string) option {
	return func(s *corev1.Service) { s.UID = types.UID(u) }
}

func shareWith(namespaces string) option { return annotated(ipset.AnnotationShareWith, namespaces) }

// ports gives s these TCP ports.
func ports(ps ...int32) option {
	return func(s *corev1.Service) {
		for _, p := range ps {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: p})
		}
	}
}

func annotated(k, v string) option {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

// Whoever may create a Service in one namespace cannot take an address
// of another namespace's, nor one of a range kept for other namespaces.
func TestComputeAcrossNamespaces(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": "198.18.0.0/24\n198.18.1.0/24 name=team-a namespaces=team-a,team-c\n198.18.2.0/24 name=lb",
		"iface": "eth0"})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	old, young := created(t0), created(t0.Add(time.Second))
	key := func(k string) option { return annotated(ipset.AnnotationSharingKey, k) }
	const noKey = "held for a/web, of another namespace (Services of different namespaces share an address only when both carry annotation eip.io/sharing-key with the same value)"
	tests := []struct {
		name       string
		external   string // the external-ips key
		services   []*corev1.Service
		want       map[string][]string // IP -> Services served
		owners     map[string]string   // IP -> owner
		rejections []ipset.Rejection
	}{
		{
			name: "the oldest Service owns the address; another namespace's is refused, listed first or not",
			services: []*corev1.Service{
				service("b/steal", externalIPs("198.18.0.5"), young),
				service("a/web", externalIPs("198.18.0.5"), old),
				service("c/lb", loadBalancer("", "198.18.0.5"), young),
			},
			want:   map[string][]string{"198.18.0.5": {"a/web"}},
			owners: map[string]string{"198.18.0.5": "a/web"},
			rejections: []ipset.Rejection{
				{Service: "b/steal", IP: "198.18.0.5", Reason: noKey},
				{Service: "c/lb", IP: "198.18.0.5", Reason: noKey},
			},
		},
		{
			name: "age decides before the name",
			services: []*corev1.Service{
				service("a/web", externalIPs("198.18.0.5"), young),
				service("z/old", externalIPs("198.18.0.5"), old),
			},
			want:   map[string][]string{"198.18.0.5": {"z/old"}},
			owners: map[string]string{"198.18.0.5": "z/old"},
			rejections: []ipset.Rejection{{Service: "a/web", IP: "198.18.0.5",
				Reason: "held for z/old, of another namespace (Services of different namespaces share an address only when both carry annotation eip.io/sharing-key with the same value)"}},
		},
		{
			name: "created in the same second: the name decides",
			services: []*corev1.Service{
				service("b/x", externalIPs("198.18.0.5"), old),
				service("a/web", externalIPs("198.18.0.5"), old),
			},
			want:       map[string][]string{"198.18.0.5": {"a/web"}},
			owners:     map[string]string{"198.18.0.5": "a/web"},
			rejections: []ipset.Rejection{{Service: "b/x", IP: "198.18.0.5", Reason: noKey}},
		},
		{
			name: "the owner's namespace shares without a key",
			services: []*corev1.Service{
				service("a/web", externalIPs("198.18.0.5"), old, key("k")),
				service("a/other", externalIPs("198.18.0.5"), young, key("z")),
				service("a/none", externalIPs("198.18.0.5"), young),
			},
			want:   map[string][]string{"198.18.0.5": {"a/none", "a/other", "a/web"}},
			owners: map[string]string{"198.18.0.5": "a/web"},
		},
		{
			name: "another namespace shares with the owner's key, not with another",
			services: []*corev1.Service{
				service("a/web", externalIPs("198.18.0.5", "198.18.0.6"), old, key("k"), shareWith("b c d")),
				service("b/shared", externalIPs("198.18.0.5"), young, key("k")),
				service("c/other", externalIPs("198.18.0.5"), young, key("z")),
				service("d/none", externalIPs("198.18.0.5"), young),
				service("e/old", externalIPs("198.18.0.7"), old),
				service("f/keyed", externalIPs("198.18.0.7"), young, key("k")),
			},
			want:   map[string][]string{"198.18.0.5": {"a/web", "b/shared"}, "198.18.0.6": {"a/web"}, "198.18.0.7": {"e/old"}},
			owners: map[string]string{"198.18.0.5": "a/web", "198.18.0.6": "a/web", "198.18.0.7": "e/old"},
			rejections: []ipset.Rejection{
				{Service: "c/other", IP: "198.18.0.5", Reason: "held for a/web, of another namespace, whose annotation eip.io/sharing-key differs"},
				{Service: "d/none", IP: "198.18.0.5", Reason: noKey},
				{Service: "f/keyed", IP: "198.18.0.7", Reason: "held for e/old, of another namespace (Services of different namespaces share an address only when both carry annotation eip.io/sharing-key with the same value)"},
			},
		},
		{
			name: "another namespace shares only with the owner's consent",
			services: []*corev1.Service{
				service("a/web", externalIPs("198.18.0.5"), old, key("k"), shareWith("b,c")),
				service("b/listed", externalIPs("198.18.0.5"), young, key("k")),
				service("e/unlisted", externalIPs("198.18.0.5"), young, key("k")),
				service("e/old", externalIPs("198.18.0.6"), old, key("k")),
				service("b/keyed", externalIPs("198.18.0.6"), young, key("k")),
			},
			want:   map[string][]string{"198.18.0.5": {"a/web", "b/listed"}, "198.18.0.6": {"e/old"}},
			owners: map[string]string{"198.18.0.5": "a/web", "198.18.0.6": "e/old"},
			rejections: []ipset.Rejection{
				{Service: "b/keyed", IP: "198.18.0.6", Reason: "held for e/old, of another namespace, whose annotation eip.io/share-with does not list namespace b"},
				{Service: "e/unlisted", IP: "198.18.0.5", Reason: "held for a/web, of another namespace, whose annotation eip.io/share-with does not list namespace e"},
			},
		},
		{
			// The older of two clashing Services is let in, whichever
			// was read first; the owner's namespace shares any port.
			name: "another namespace shares only other ports",
			services: []*corev1.Service{
				service("c/young", externalIPs("198.18.0.5"), created(t0.Add(2*time.Second)), key("k"), ports(443)),
				service("a/web", externalIPs("198.18.0.5"), old, key("k"), shareWith("b c"), ports(80)),
				service("a/again", externalIPs("198.18.0.5"), young, ports(80)),
				service("b/clash", externalIPs("198.18.0.5"), young, key("k"), ports(8080, 80)),
				service("b/other", externalIPs("198.18.0.5"), young, key("k"), ports(443)),
			},
			want:   map[string][]string{"198.18.0.5": {"a/again", "a/web", "b/other"}},
			owners: map[string]string{"198.18.0.5": "a/web"},
			rejections: []ipset.Rejection{
				{Service: "b/clash", IP: "198.18.0.5", Reason: "held for a/web, of another namespace, and port TCP/80 is served on it for a/web"},
				{Service: "c/young", IP: "198.18.0.5", Reason: "held for a/web, of another namespace, and port TCP/443 is served on it for b/other"},
			},
		},
		{
			name: "a range kept for some namespaces",
			services: []*corev1.Service{
				service("b/steal", externalIPs("198.18.1.5", "198.18.1.6"), old),
				service("team-a/web", externalIPs("198.18.1.5"), young),
				service("team-c/lb", loadBalancer("", "198.18.1.7"), young),
			},
			want:   map[string][]string{"198.18.1.5": {"team-a/web"}, "198.18.1.7": {"team-c/lb"}},
			owners: map[string]string{"198.18.1.5": "team-a/web", "198.18.1.7": "team-c/lb"},
			rejections: []ipset.Rejection{
				{Service: "b/steal", IP: "198.18.1.5", Reason: "range team-a is only for namespaces team-a, team-c, not b"},
				{Service: "b/steal", IP: "198.18.1.6", Reason: "range team-a is only for namespaces team-a, team-c, not b"},
			},
		},
		{
			name:     "external-ips off: LoadBalancer addresses only; a refused claim owns nothing",
			external: "off",
			services: []*corev1.Service{
				service("b/ext", externalIPs("198.18.2.5", "198.18.0.9"), old),
				service("a/lb", loadBalancer("", "198.18.2.5"), young),
				service("a/both", externalIPs("198.18.2.6"), loadBalancer("", "198.18.2.7"), young),
			},
			want:   map[string][]string{"198.18.2.5": {"a/lb"}, "198.18.2.7": {"a/both"}},
			owners: map[string]string{"198.18.2.5": "a/lb", "198.18.2.7": "a/both"},
			rejections: []ipset.Rejection{
				{Service: "a/both", IP: "198.18.2.6", Reason: ipset.ReasonExternalIPsOff},
				{Service: "b/ext", IP: "198.18.0.9", Reason: ipset.ReasonExternalIPsOff},
				{Service: "b/ext", IP: "198.18.2.5", Reason: ipset.ReasonExternalIPsOff},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cfg
			if tc.external != "" {
				cfg = mustParse(t, map[string]string{"ranges": cfg.Ranges[0].Text + "\n" + cfg.Ranges[1].Text + "\n" + cfg.Ranges[2].Text,
					"iface": "eth0", "external-ips": tc.external})
			}
			entries, rejections := compute(tc.services, cfg, nil)
			got, owners := map[string][]string{}, map[string]string{}
			for _, e := range entries {
				got[e.IP.String()], owners[e.IP.String()] = e.Services, e.Owner.Service
			}
			assert.DeepEqual(t, got, tc.want)
			assert.DeepEqual(t, owners, tc.owners)
			assert.DeepEqual(t, rejections, tc.rejections)
		})
	}
}

// The Service a lock records as the owner of its address keeps it while it
// names it, whatever its age: a Service of another namespace, older, edited
// to name the address is refused. Age decides only when no lock records an
// owner, or the recorded one no longer names the address or may not use
// it; a Service deleted and made again under its name is another one.
func TestComputeIncumbent(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": "198.18.0.0/24\n198.18.1.0/24 name=team-b namespaces=b"})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	old, young := created(t0), created(t0.Add(time.Second))
	const ip, kept = "198.18.0.5", "198.18.1.5"
	web := ipset.Owner{Service: "a/web", UID: "web-1"}
	steal := service("b/steal", externalIPs(ip, kept), old, uid("steal-1"))
	stealer := ipset.Owner{Service: "b/steal", UID: "steal-1"}
	const heldForWeb = "held for a/web, of another namespace (Services of different namespaces share an address only when both carry annotation eip.io/sharing-key with the same value)"
	const heldForSteal = "held for b/steal, of another namespace (Services of different namespaces share an address only when both carry annotation eip.io/sharing-key with the same value)"
	const notA = "range team-b is only for namespace b, not a"
	tests := []struct {
		name       string
		services   []*corev1.Service
		recorded   map[string]ipset.Owner // IP -> the owner its lock records
		owners     map[string]ipset.Owner
		rejections []ipset.Rejection
	}{
		{
			name:       "the recorded owner keeps its address against an older Service",
			services:   []*corev1.Service{steal, service("a/web", externalIPs(ip), young, uid("web-1"))},
			recorded:   map[string]ipset.Owner{ip: web},
			owners:     map[string]ipset.Owner{ip: web, kept: stealer},
			rejections: []ipset.Rejection{{Service: "b/steal", IP: ip, Reason: heldForWeb}},
		},
		{
			name:       "listed first or last",
			services:   []*corev1.Service{service("a/web", externalIPs(ip), young, uid("web-1")), steal},
			recorded:   map[string]ipset.Owner{ip: web},
			owners:     map[string]ipset.Owner{ip: web, kept: stealer},
			rejections: []ipset.Rejection{{Service: "b/steal", IP: ip, Reason: heldForWeb}},
		},
		{
			name:       "no lock records an owner: the oldest owns it",
			services:   []*corev1.Service{steal, service("a/web", externalIPs(ip), young, uid("web-1"))},
			owners:     map[string]ipset.Owner{ip: stealer, kept: stealer},
			rejections: []ipset.Rejection{{Service: "a/web", IP: ip, Reason: heldForSteal}},
		},
		{
			name:     "the recorded owner no longer names it: the oldest owns it",
			services: []*corev1.Service{steal, service("a/web", externalIPs("198.18.0.6"), young, uid("web-1"))},
			recorded: map[string]ipset.Owner{ip: web},
			owners:   map[string]ipset.Owner{ip: stealer, kept: stealer, "198.18.0.6": web},
		},
		{
			name:       "made again under the recorded owner's name: another Service",
			services:   []*corev1.Service{steal, service("a/web", externalIPs(ip), young, uid("web-2"))},
			recorded:   map[string]ipset.Owner{ip: web},
			owners:     map[string]ipset.Owner{ip: stealer, kept: stealer},
			rejections: []ipset.Rejection{{Service: "a/web", IP: ip, Reason: heldForSteal}},
		},
		{
			name:       "the recorded owner may no longer use it: the oldest that may owns it",
			services:   []*corev1.Service{steal, service("a/web", externalIPs(kept), young, uid("web-1"))},
			recorded:   map[string]ipset.Owner{kept: web},
			owners:     map[string]ipset.Owner{ip: stealer, kept: stealer},
			rejections: []ipset.Rejection{{Service: "a/web", IP: kept, Reason: notA}},
		},
		{
			name: "the recorded owner shares as an owner does",
			services: []*corev1.Service{
				service("b/steal", externalIPs(ip), old, uid("steal-1"), annotated(ipset.AnnotationSharingKey, "k"), ports(443)),
				service("a/web", externalIPs(ip), young, uid("web-1"), annotated(ipset.AnnotationSharingKey, "k"), shareWith("b"), ports(80)),
			},
			recorded: map[string]ipset.Owner{ip: web},
			owners:   map[string]ipset.Owner{ip: web},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kept := make([]*ipset.Service, len(tc.services))
			for i, svc := range tc.services {
				kept[i] = ipset.ServiceOf(svc)
			}
			entries, rejections := ipset.Compute(kept, cfg, nil, func(ip netip.Addr) ipset.Owner { return tc.recorded[ip.String()] })
			owners := map[string]ipset.Owner{}
			for _, e := range entries {
				owners[e.IP.String()] = e.Owner
			}
			assert.DeepEqual(t, owners, tc.owners)
			assert.DeepEqual(t, rejections, tc.rejections)
		})
	}
}

// The caps refuse the addresses a Service names beyond its own, in the
// order it names them, and those the Services of a namespace name beyond
// the namespace's, older Services first, whatever the order the Services
// are read in; text that is not an address and another load balancer's
// addresses count against neither.
func TestComputeCaps(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": "198.18.0.0/24", "load-balancer-class": "only",
		"max-ips-per-service": "2", "max-ips-per-namespace": "3"})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	services := []*corev1.Service{
		service("a/young", externalIPs("198.18.0.20", "198.18.0.21"), created(t0.Add(time.Hour))),
		service("a/many", externalIPs("198.18.0.12", "198.18.0.11", "not an IP", "198.18.0.10"), loadBalancer("", "198.18.0.13"), created(t0)),
		service("a/old", externalIPs("198.18.0.30"), created(t0.Add(time.Minute))),
		service("b/other", externalIPs("198.18.0.40", "198.18.0.41"), created(t0.Add(time.Hour))),
	}
	const perService = "the Service names more than 2 addresses (max-ips-per-service in the ConfigMap)"
	const perNamespace = "the Services of namespace a name more than 3 addresses (max-ips-per-namespace in the ConfigMap); the addresses' recorded owners go first, then older Services"
	wantEntries := []string{"198.18.0.11", "198.18.0.12", "198.18.0.30", "198.18.0.40", "198.18.0.41"}
	wantRejections := []ipset.Rejection{
		{Service: "a/many", IP: "198.18.0.10", Reason: perService},
		{Service: "a/many", IP: "not an IP", Reason: "not a valid IP address"},
		{Service: "a/young", IP: "198.18.0.20", Reason: perNamespace},
		{Service: "a/young", IP: "198.18.0.21", Reason: perNamespace},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10 {
		rng.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		entries, rejections := compute(services, cfg, nil)
		var got []string
		for _, e := range entries {
			got = append(got, e.IP.String())
		}
		assert.DeepEqual(t, got, wantEntries)
		assert.DeepEqual(t, rejections, wantRejections)
	}

	// Under load-balancer-class any, a/many's class-less address is eip's
	// and counts; without a namespace cap, a/young keeps its two.
	cfg = mustParse(t, map[string]string{"ranges": "198.18.0.0/24", "max-ips-per-service": "2"})
	entries, rejections := compute(services, cfg, nil)
	assert.Equal(t, len(entries), 7)
	assert.DeepEqual(t, rejections, []ipset.Rejection{
		{Service: "a/many", IP: "198.18.0.10", Reason: perService},
		{Service: "a/many", IP: "198.18.0.13", Reason: perService},
		{Service: "a/many", IP: "not an IP", Reason: "not a valid IP address"},
	})
}

// eip.io/preferred-nodes is read only from the namespace that owns the
// address, and only when it lists node names.
func TestComputePreferredNodes(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": "198.18.0.0/24"})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	old, young := created(t0), created(t0.Add(time.Second))
	prefer := func(v string) option { return annotated(ipset.AnnotationPreferredNodes, v) }
	key := annotated(ipset.AnnotationSharingKey, "k")
	tests := []struct {
		name       string
		services   []*corev1.Service
		want       []string
		rejections []ipset.Rejection
	}{
		{name: "none", services: []*corev1.Service{service("a/web", externalIPs("198.18.0.5"))}},
		{
			name:     "the owner's, as a list",
			services: []*corev1.Service{service("a/web", externalIPs("198.18.0.5"), prefer("node-b, node-a node-b"))},
			want:     []string{"node-b", "node-a"},
		},
		{
			name: "of the owner's namespace, the first by name",
			services: []*corev1.Service{
				service("a/web", externalIPs("198.18.0.5"), old),
				service("a/z", externalIPs("198.18.0.5"), young, prefer("node-z")),
				service("a/b", externalIPs("198.18.0.5"), young, prefer("node-b")),
			},
			want: []string{"node-b"},
		},
		{
			name: "a Service sharing from another namespace does not choose",
			services: []*corev1.Service{
				service("a/web", externalIPs("198.18.0.5"), old, key, annotated(ipset.AnnotationShareWith, "b")),
				service("b/shared", externalIPs("198.18.0.5"), young, key, prefer("node-b")),
			},
			rejections: []ipset.Rejection{{Service: "b/shared", IP: "198.18.0.5", Preference: true,
				Reason: "only Services of namespace a, which holds the address (a/web), choose where it lives"}},
		},
		{
			name: "a refused Service's preference is moot",
			services: []*corev1.Service{
				service("a/web", externalIPs("198.18.0.5"), old),
				service("b/steal", externalIPs("198.18.0.5"), young, prefer("node-b")),
			},
			rejections: []ipset.Rejection{{Service: "b/steal", IP: "198.18.0.5",
				Reason: "held for a/web, of another namespace (Services of different namespaces share an address only when both carry annotation eip.io/sharing-key with the same value)"}},
		},
		{
			name: "not node names: ignored, the next one decides",
			services: []*corev1.Service{
				service("a/a", externalIPs("198.18.0.5"), old, prefer("node-a,Node_B,-x")),
				service("a/b", externalIPs("198.18.0.5"), young, prefer("node-c")),
			},
			want: []string{"node-c"},
			rejections: []ipset.Rejection{{Service: "a/a", IP: "198.18.0.5", Preference: true,
				Reason: `annotation eip.io/preferred-nodes: "Node_B" is not a node name: ` + dns1123Subdomain + `; annotation eip.io/preferred-nodes: "-x" is not a node name: ` + dns1123Subdomain}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			entries, rejections := compute(tc.services, cfg, nil)
			assert.Equal(t, len(entries), 1)
			assert.DeepEqual(t, entries[0].Preferred, tc.want)
			assert.DeepEqual(t, rejections, tc.rejections)
		})
	}
}

// dns1123Subdomain is what apimachinery says of a name that is not one.
const dns1123Subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"

// compute is ipset.Compute of services as eipd's cache keeps them.
func compute(services []*corev1.Service, cfg config.Config, reserved map[netip.Addr]string) ([]ipset.Entry, []ipset.Rejection) {
	kept := make([]*ipset.Service, len(services))
	for i, svc := range services {
		if svc != nil {
			kept[i] = ipset.ServiceOf(svc)
		}
	}
	return ipset.Compute(kept, cfg, reserved, nil)
}

// A namespace's cap counts its claims in the order of ownership: those of
// the Service each address's lock records as its owner first, whatever
// their age, then the others by age. A Service of the namespace, older,
// edited to name new addresses is refused them, not the addresses the
// namespace already serves; without recorded owners, age alone decides.
func TestComputeNamespaceCapServesOwnersFirst(t *testing.T) {
	cfg := mustParse(t, map[string]string{"ranges": "198.18.0.0/24", "max-ips-per-namespace": "2"})
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	web := ipset.Owner{Service: "a/web", UID: "web-1"}
	services := []*corev1.Service{
		service("a/web", externalIPs("198.18.0.20", "198.18.0.21"), created(t0.Add(time.Hour)), uid("web-1")),
		service("a/old", externalIPs("198.18.0.30"), created(t0), uid("old-1")),
	}
	const perNamespace = "the Services of namespace a name more than 2 addresses (max-ips-per-namespace in the ConfigMap); the addresses' recorded owners go first, then older Services"
	tests := []struct {
		name       string
		recorded   map[string]ipset.Owner
		served     []string
		rejections []ipset.Rejection
	}{{
		name:     "the locks record a/web",
		recorded: map[string]ipset.Owner{"198.18.0.20": web, "198.18.0.21": web},
		served:   []string{"198.18.0.20", "198.18.0.21"},
		rejections: []ipset.Rejection{
			{Service: "a/old", IP: "198.18.0.30", Reason: perNamespace},
		},
	}, {
		name:   "no lock records an owner",
		served: []string{"198.18.0.20", "198.18.0.30"},
		rejections: []ipset.Rejection{
			{Service: "a/web", IP: "198.18.0.21", Reason: perNamespace},
		},
	}, {
		name:     "a/web made again under its name is another Service",
		recorded: map[string]ipset.Owner{"198.18.0.20": {Service: "a/web", UID: "web-0"}, "198.18.0.21": {Service: "a/web", UID: "web-0"}},
		served:   []string{"198.18.0.20", "198.18.0.30"},
		rejections: []ipset.Rejection{
			{Service: "a/web", IP: "198.18.0.21", Reason: perNamespace},
		},
	}}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 4 {
				rng.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
				kept := make([]*ipset.Service, len(services))
				for i, svc := range services {
					kept[i] = ipset.ServiceOf(svc)
				}
				entries, rejections := ipset.Compute(kept, cfg, nil, func(ip netip.Addr) ipset.Owner { return tc.recorded[ip.String()] })
				var served []string
				for _, e := range entries {
					served = append(served, e.IP.String())
				}
				assert.DeepEqual(t, served, tc.served)
				assert.DeepEqual(t, rejections, tc.rejections)
			}
		})
	}
}
