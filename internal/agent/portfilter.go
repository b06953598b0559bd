package agent

import (
	"log/slog"
	"net/netip"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/netif"
)

// PortFilter keeps traffic to the managed addresses to their Services'
// ports (netif.PortFilter).
type PortFilter interface {
	// Set filters traffic to addrs down to served.
	Set(addrs []netip.Addr, served []netif.Served) error
	Remove() error
}

// servedPorts keeps the node's port filter in step with the managed IPs
// and the ports of the Services each serves: on every change of them, and
// again at each resync after an apply failed.
type servedPorts struct {
	filter PortFilter
	log    *slog.Logger
	// failed: the last apply failed, so the filter may be behind.
	failed bool
	// removed: the filter is off (port-filter: off) and was removed.
	removed bool
}

// apply sets the filter for entries, whose Services are among svcs, or
// removes it when off. A failure is logged: resync tries again.
func (p *servedPorts) apply(on bool, entries []ipset.Entry, svcs []*ipset.Service) {
	var err error
	if !on {
		if p.removed {
			return
		}
		err = p.filter.Remove()
		p.failed, p.removed = err != nil, err == nil
	} else {
		p.removed = false
		addrs, served := filterOf(entries, svcs)
		err = p.filter.Set(addrs, served)
		p.failed = err != nil
	}
	if err != nil {
		p.log.Warn("port filter: external IPs may answer on every port of this node until it applies", "err", err)
	}
}

// filterOf is what the filter lets through: to each IP, the protocols and
// ports of the Services it serves.
func filterOf(entries []ipset.Entry, svcs []*ipset.Service) ([]netip.Addr, []netif.Served) {
	ports := make(map[string][]ipset.Port, len(svcs))
	for _, svc := range svcs {
		if svc != nil && len(svc.Ports) > 0 {
			ports[svc.Key()] = svc.Ports
		}
	}
	addrs := make([]netip.Addr, 0, len(entries))
	var served []netif.Served
	for _, e := range entries {
		addrs = append(addrs, e.IP)
		for _, key := range e.Services {
			for _, p := range ports[key] {
				if proto, ok := ipProto(p.Protocol); ok && p.Port > 0 && p.Port < 1<<16 {
					served = append(served, netif.Served{Addr: e.IP, Proto: proto, Port: uint16(p.Port)})
				}
			}
		}
	}
	return addrs, served
}

// ipProto is the IP protocol number of a Service port's protocol (TCP
// when unset, as the API server defaults it).
func ipProto(p corev1.Protocol) (uint8, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return unix.IPPROTO_TCP, true
	case corev1.ProtocolUDP:
		return unix.IPPROTO_UDP, true
	case corev1.ProtocolSCTP:
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}
