package agent

import (
	"net/netip"

	"github.com/eip-project/eip/internal/config"
)

// lanLink says whether iface is a link eipd binds on: a range's
// interface, or, for a range whose interface is auto, the one its first
// address resolves to; or one an IP is bound on. Only such a link's
// return means that peers may have taken IPs meanwhile, so that the locks
// are read again before binding (linkEvent). A pod's veth, which comes up
// as the pod starts, is none of them: counting it delayed every bind and
// lock write on a node starting a pod until its next renewal came back,
// up to a renew interval, and every race a renew interval more, just when
// an IP of the pod's Local Service was handed there.
//
// ranges are the configured ranges, ifaces resolves their interfaces,
// bound is what is bound.
func lanLink(iface string, ranges []config.Range, ifaces ifaceResolver, bound map[netip.Addr]binding) bool {
	for _, r := range ranges {
		if i, err := ifaces.ifaceFor(r.First, config.Binding{Iface: r.Iface}); err == nil && i == iface {
			return true
		}
	}
	for _, b := range bound {
		if b.iface == iface {
			return true
		}
	}
	return false
}
