package testenv

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// Names of the two namespaces that are not nodes, for the methods that take
// a name ([Cluster.Exec], [Cluster.AddLatency]); nodes go by their Node name.
const (
	ControlPlane = "cp"
	Client       = "client"
)

const (
	lanPrefixV4 = 16
	lanPrefixV6 = 64
	apiPort     = 6443
	maxNodes    = 89 // node addresses are 198.18.0.11 … 198.18.0.99
)

// Node is one node namespace: a Kubernetes Node object and a host on the LAN.
type Node struct {
	// Name is the Kubernetes Node name ("node-1"), used by every method.
	Name string
	// Netns is the network namespace, for `ip netns exec`.
	Netns string
	// IPv4 and IPv6 are the node's own addresses on eth0.
	IPv4, IPv6 netip.Addr
	// MAC is the hardware address of the node's eth0.
	MAC net.HardwareAddr
}

// endpoint is a namespace attached to the LAN bridge by a veth pair whose
// inner end is eth0.
type endpoint struct {
	name string // cp, client, or a node name
	ns   *namespace
	port string // the veth end on the bridge, in the lan namespace
	ipv4 netip.Addr
	ipv6 netip.Addr
	mac  net.HardwareAddr
}

func (e *endpoint) node() Node {
	return Node{Name: e.name, Netns: e.ns.name, IPv4: e.ipv4, IPv6: e.ipv6, MAC: e.mac}
}

// host returns the addresses of the n-th host of the LAN: 1 is the control
// plane, 2 the client, 10+i node i.
func host(n int) (netip.Addr, netip.Addr, net.HardwareAddr) {
	v4 := netip.AddrFrom4([4]byte{198, 18, 0, byte(n)})
	v6 := netip.MustParseAddr(fmt.Sprintf("2001:db8::%d", n))
	mac := net.HardwareAddr{0x02, 0xee, 0, 0, 0, byte(n)}
	return v4, v6, mac
}

// ClientAddr is the client namespace's IPv4 address on the LAN.
func ClientAddr() netip.Addr {
	v4, _, _ := host(2)
	return v4
}

// ServiceIP returns the n-th address (1 ≤ n < 39000) of a block of the LAN
// that no namespace owns, 198.18.100.1 onwards, for external IPs in tests.
func ServiceIP(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(100 + n/256), byte(n % 256)})
}

// ServiceIPv6 is [ServiceIP] for IPv6: 2001:db8::100:<n in hex>.
func ServiceIPv6(n int) netip.Addr {
	return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: 0x01, 14: byte(n >> 8), 15: byte(n)})
}

// LANPrefixes returns the on-link prefixes of the LAN, as the nodes see them.
func LANPrefixes() (netip.Prefix, netip.Prefix) {
	v4, v6, _ := host(0)
	return netip.PrefixFrom(v4, lanPrefixV4).Masked(), netip.PrefixFrom(v6, lanPrefixV6).Masked()
}

// createBridge makes the lan namespace's bridge. The bridge floods multicast
// (no snooping) and forwards at once (no STP), like a plain switch.
func createBridge(ctx context.Context, lan *namespace) error {
	if err := lan.sysctl(map[string]string{
		"net.ipv6.conf.all.disable_ipv6":     "1",
		"net.ipv6.conf.default.disable_ipv6": "1",
	}); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0"},
		{"link", "set", "br0", "up"},
	} {
		if err := run(ctx, nil, "ip", append([]string{"-n", lan.name}, args...)...); err != nil {
			return fmt.Errorf("create bridge: %w", err)
		}
	}
	return nil
}

// attach connects the endpoint's namespace to the bridge and configures its
// eth0. IPv6 addresses skip duplicate address detection so that they are
// usable at once.
func attach(ctx context.Context, lan *namespace, e *endpoint) error {
	if err := e.ns.sysctl(map[string]string{
		"net.ipv6.conf.all.accept_dad":     "0",
		"net.ipv6.conf.default.accept_dad": "0",
	}); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", lan.name, "link", "add", e.port, "type", "veth", "peer", "name", "eth0", "address", e.mac.String(), "netns", e.ns.name},
		{"-n", lan.name, "link", "set", e.port, "master", "br0", "up"},
		{"-n", e.ns.name, "link", "set", "lo", "up"},
		{"-n", e.ns.name, "link", "set", "eth0", "up"},
		{"-n", e.ns.name, "addr", "add", netip.PrefixFrom(e.ipv4, lanPrefixV4).String(), "dev", "eth0"},
		{"-n", e.ns.name, "addr", "add", netip.PrefixFrom(e.ipv6, lanPrefixV6).String(), "dev", "eth0", "nodad"},
	}
	for _, args := range steps {
		if err := run(ctx, nil, "ip", args...); err != nil {
			return fmt.Errorf("attach %s: %w", e.name, err)
		}
	}
	return nil
}
