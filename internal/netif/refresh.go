package netif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Bound is an address bound on an interface, as Refresh renews it.
type Bound struct {
	Iface  string
	Prefix netip.Prefix
}

// refreshBatch is how many address messages one sendmsg carries: about
// 20 KiB, well inside the default socket buffers, while 5,000 addresses
// cost 20 system calls instead of 5,000 round trips.
const refreshBatch = 256

// Refresh renews the kernel lifetime of addresses bound with Add, many per
// system call: the requests of a batch go to the kernel in one message and
// only the last asks for an acknowledgement (the kernel reports failures
// whether asked or not, and handles a message's requests in order).
//
// Like Add, a refresh binds an address that is missing: the kernel offers
// no "update only". The caller must not refresh an address it is removing.
// Errors name each address that failed; the others are renewed.
func (a *Addresses) Refresh(addrs []Bound, lifetime time.Duration) error {
	if a.err != nil {
		return fmt.Errorf("refresh addresses: %w", a.err)
	}
	secs, err := lifetimeSeconds(lifetime)
	if err != nil {
		return fmt.Errorf("refresh addresses: %w", err)
	}
	a.refreshMu.Lock()
	defer a.refreshMu.Unlock()
	if a.refreshFD < 0 {
		if a.refreshFD, err = openRouteSocket(a.ns); err != nil {
			return fmt.Errorf("refresh addresses: %w", err)
		}
	}
	var errs error
	for len(addrs) > 0 {
		n := min(len(addrs), refreshBatch)
		errs = errors.Join(errs, a.refreshBatch(addrs[:n], secs))
		addrs = addrs[n:]
	}
	return errs
}

// openRouteSocket opens a blocking NETLINK_ROUTE socket in ns, bound to a
// port the kernel picks, whose reads and writes time out after
// netlinkTimeout.
func openRouteSocket(ns netNamespace) (int, error) {
	fd := -1
	err := ns.do(func() error {
		s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("open netlink: %w", err)
		}
		tv := unix.NsecToTimeval(netlinkTimeout.Nanoseconds())
		if err := errors.Join(
			unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}),
			unix.SetsockoptTimeval(s, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv),
			unix.SetsockoptTimeval(s, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv),
		); err != nil {
			_ = unix.Close(s)
			return fmt.Errorf("set up netlink socket: %w", err)
		}
		fd = s
		return nil
	})
	return fd, err
}

// refreshBatch sends one batch and collects the kernel's answers.
func (a *Addresses) refreshBatch(addrs []Bound, secs int) error {
	var errs error
	var reqs []*nl.NetlinkRequest
	sent := map[uint32]Bound{}
	for _, b := range addrs {
		link, err := a.cachedLink(b.Iface)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("refresh %s on %s: %w", b.Prefix, b.Iface, err))
			continue
		}
		req := addrRequest(link.Attrs().Index, b.Prefix, secs, unix.NLM_F_CREATE|unix.NLM_F_REPLACE)
		sent[req.Seq] = b
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		return errs
	}
	last := reqs[len(reqs)-1]
	last.Flags |= unix.NLM_F_ACK
	var buf []byte
	for _, req := range reqs {
		buf = append(buf, req.Serialize()...)
	}
	if err := unix.Sendto(a.refreshFD, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return errors.Join(errs, a.resetRefreshSocket(fmt.Errorf("refresh %d addresses: send: %w", len(reqs), err)))
	}
	rb := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(a.refreshFD, rb, 0)
		if err != nil {
			return errors.Join(errs, a.resetRefreshSocket(fmt.Errorf("refresh %d addresses: receive: %w", len(reqs), err)))
		}
		msgs, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			return errors.Join(errs, a.resetRefreshSocket(fmt.Errorf("refresh %d addresses: parse answer: %w", len(reqs), err)))
		}
		for _, m := range msgs {
			b, ours := sent[m.Header.Seq]
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 || !ours {
				continue // not an answer to this batch
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				errs = errors.Join(errs, fmt.Errorf("refresh %s on %s: %w", b.Prefix, b.Iface, unix.Errno(-code)))
			}
			if m.Header.Seq == last.Seq {
				return errs
			}
		}
	}
}

// resetRefreshSocket closes a socket whose answers may be out of step with
// its requests; the next Refresh opens a new one.
func (a *Addresses) resetRefreshSocket(err error) error {
	_ = unix.Close(a.refreshFD)
	a.refreshFD = -1
	return err
}

// addrRequest is the RTM_NEWADDR request that Add's AddrReplace sends for
// p on the link with that index, with a lifetime of secs seconds.
func addrRequest(index int, p netip.Prefix, secs, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, flags)
	msg := nl.NewIfAddrmsg(family(p.Addr()))
	msg.Index = uint32(index)
	msg.Prefixlen = uint8(p.Bits())
	req.AddData(msg)
	ip := p.Addr().AsSlice()
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, ip))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, ip))
	if p.Addr().Is4() && p.Bits() < 31 {
		req.AddData(nl.NewRtAttr(unix.IFA_BROADCAST, broadcast(p)))
	}
	req.AddData(nl.NewRtAttr(unix.IFA_FLAGS, nl.Uint32Attr(uint32(addrFlags(p)))))
	ci := nl.IfaCacheInfo{IfaCacheinfo: unix.IfaCacheinfo{Valid: uint32(secs), Prefered: uint32(secs)}}
	req.AddData(nl.NewRtAttr(unix.IFA_CACHEINFO, ci.Serialize()))
	return req
}

// broadcast is the all-ones host address of p's subnet, as AddrReplace
// sets it.
func broadcast(p netip.Prefix) []byte {
	ip := p.Addr().As4()
	mask := ^uint32(0) >> p.Bits()
	v := binary.BigEndian.Uint32(ip[:]) | mask
	return binary.BigEndian.AppendUint32(nil, v)
}
