package netif

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// addrDumper lists addresses over a netlink socket of its own, on which
// the kernel checks requests strictly (NETLINK_GET_STRICT_CHK, Linux 4.20
// and later): a dump that names an interface then carries only that
// interface's addresses. netlink.Handle.AddrList names none, so every
// listing of any interface received every address of the node, eipd's
// device's thousands included, and dropped the others here. Answers are
// read straight into ifAddr, without a netlink.Addr per address.
type addrDumper struct {
	sockets map[int]*nl.SocketHandle
	// strict says the kernel filters by interface; without it the dump
	// carries every interface's addresses, and the filter here is all.
	strict bool
}

// openAddrDumper opens the socket in ns.
func openAddrDumper(ns netNamespace) (*addrDumper, error) {
	var s *nl.NetlinkSocket
	err := ns.do(func() error {
		var err error
		s, err = nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	tv := unix.NsecToTimeval(netlinkTimeout.Nanoseconds())
	_ = s.SetSendTimeout(&tv)
	_ = s.SetReceiveTimeout(&tv)
	strict := unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1) == nil
	return &addrDumper{sockets: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: s}}, strict: strict}, nil
}

func (d *addrDumper) close() {
	d.sockets[unix.NETLINK_ROUTE].Socket.Close()
}

// list returns the addresses of family fam (netlink.FAMILY_ALL: both) on
// the interface with that index, or on every interface for index 0. An
// interface that is gone is unix.ENODEV under strict checking, and has
// no addresses otherwise.
func (d *addrDumper) list(index, fam int) ([]ifAddr, error) {
	addrs, err := dump(func() ([]ifAddr, error) {
		req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		req.Sockets = d.sockets
		msg := nl.NewIfAddrmsg(fam)
		msg.Index = uint32(index)
		req.AddData(msg)
		var out []ifAddr
		err := req.ExecuteIter(unix.NETLINK_ROUTE, unix.RTM_NEWADDR, func(m []byte) bool {
			ia, ok := parseIfAddr(m)
			if ok && (index == 0 || ia.link == index) && (fam == netlink.FAMILY_ALL || family(ia.prefix.Addr()) == fam) {
				out = append(out, ia)
			}
			return true
		})
		return out, err
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	return addrs, nil
}

// parseIfAddr reads an RTM_NEWADDR message's payload as
// netlink.Handle.AddrList and toIfAddr would: the prefix is IFA_ADDRESS
// with the message's length, unless IFA_LOCAL differs from it (an address
// with a peer, or any IPv6 address that carries IFA_LOCAL): then it is
// IFA_LOCAL as a host address.
func parseIfAddr(m []byte) (ifAddr, bool) {
	if len(m) < unix.SizeofIfAddrmsg {
		return ifAddr{}, false
	}
	msg := nl.DeserializeIfAddrmsg(m)
	if msg.Family != unix.AF_INET && msg.Family != unix.AF_INET6 {
		return ifAddr{}, false
	}
	var local, address netip.Addr
	flags := int(msg.Flags)
	native := nl.NativeEndian()
	for b := m[unix.SizeofIfAddrmsg:]; len(b) >= unix.SizeofRtAttr; {
		n := int(native.Uint16(b))
		if n < unix.SizeofRtAttr || n > len(b) {
			return ifAddr{}, false
		}
		v := b[unix.SizeofRtAttr:n]
		switch native.Uint16(b[2:]) {
		case unix.IFA_LOCAL:
			local, _ = netip.AddrFromSlice(v)
		case unix.IFA_ADDRESS:
			address, _ = netip.AddrFromSlice(v)
		case unix.IFA_FLAGS:
			if len(v) >= 4 {
				flags = int(native.Uint32(v))
			}
		}
		b = b[min(rtaAlign(n), len(b)):]
	}
	ip, bits := address, int(msg.Prefixlen)
	if local.IsValid() && (msg.Family != unix.AF_INET || local != address) {
		ip, bits = local, local.BitLen()
	}
	if !ip.IsValid() {
		return ifAddr{}, false
	}
	return newIfAddr(int(msg.Index), netip.PrefixFrom(ip.Unmap(), bits), int(msg.Scope), flags), true
}

func rtaAlign(n int) int {
	return (n + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1)
}
