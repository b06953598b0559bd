package agent

import (
	"net/netip"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
)

func TestElsewhere(t *testing.T) {
	node := func(addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: addrs}}
	}
	internal := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	v4, v6 := internal("198.18.0.12"), internal("2001:db8::12")
	// This host: 198.18.0.11/16 and 2001:db8::11/64; 10.0.0.0/8 is nowhere.
	onHost := func(ip netip.Addr) (bool, bool) {
		switch {
		case ip == netip.MustParseAddr("198.18.0.11") || ip == netip.MustParseAddr("2001:db8::11"):
			return true, true
		case netip.MustParsePrefix("198.18.0.0/16").Contains(ip) || netip.MustParsePrefix("2001:db8::/64").Contains(ip):
			return false, true
		}
		return false, false
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want []netip.Addr
	}{
		{"this node", node(internal("198.18.0.11"), internal("2001:db8::11")), nil},
		{"one of its addresses is here", node(v4, internal("2001:db8::11")), nil},
		{"another node of this LAN", node(v4, v6), []netip.Addr{netip.MustParseAddr("198.18.0.12"), netip.MustParseAddr("2001:db8::12")}},
		{"an address this host cannot place", node(v4, internal("10.1.2.3")), nil},
		{"mapped form", node(internal("::ffff:198.18.0.12")), []netip.Addr{netip.MustParseAddr("198.18.0.12")}},
		{"only external and host names", node(corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.18.0.12"}, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n2"}), nil},
		{"no addresses", node(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := elsewhere(tc.node, onHost)
			assert.DeepEqual(t, fmtAddrs(got), fmtAddrs(tc.want))
		})
	}
}

func fmtAddrs(a []netip.Addr) []string {
	var out []string
	for _, ip := range a {
		out = append(out, ip.String())
	}
	return out
}
