package agent

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// checkIdentity refuses to run under the name of a node this host is not.
// A daemon started with another node's name (a wrong --node-name) would
// renew that node's heartbeat and bind its IPs a second time, from a second
// MAC.
func (a *Agent) checkIdentity() error {
	n, err := a.nodes.Get(a.opt.Node)
	if err != nil {
		return nil // no Node object: the eligibility rules say so
	}
	onHost := func(ip netip.Addr) (have, known bool) {
		iface, err := a.opt.Links.IfaceFor(ip)
		if err != nil {
			return false, false
		}
		addrs, err := a.opt.Addresser.List(iface)
		if err != nil {
			return false, false
		}
		for _, p := range addrs {
			if p.Addr() == ip {
				return true, true
			}
		}
		return false, true
	}
	if addrs := elsewhere(n, onHost); len(addrs) > 0 {
		return fmt.Errorf("node %s: none of its addresses %v is on this host: --node-name (or NODE_NAME) names another node", a.opt.Node, addrs)
	}
	return nil
}

// elsewhere returns the Node's InternalIP addresses when they prove that
// this host is another node, nil otherwise. onHost reports whether an
// address is on this host, and whether it could tell: it can when the
// interface of the address's subnet is here. Only when every InternalIP is
// known to be absent is the proof complete; a Node without InternalIP, or
// an address this host cannot place, proves nothing.
func elsewhere(n *corev1.Node, onHost func(netip.Addr) (have, known bool)) []netip.Addr {
	var want []netip.Addr
	for _, ad := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(ad.Address); err == nil && ad.Type == corev1.NodeInternalIP {
			want = append(want, ip.Unmap())
		}
	}
	for _, ip := range want {
		if have, known := onHost(ip); have || !known {
			return nil
		}
	}
	return want
}
