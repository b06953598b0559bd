package netif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Ask asks the LAN once who holds ip, as an ordinary host would before it
// sends to ip: an ARP request or a neighbour solicitation from an address
// of iface's own. Unlike Probe it says nothing of wanting ip: a holder
// reads a probe as another machine about to take the address (RFC 5227
// §2.1.1), and one cut off from the API server gives the address up to
// it, so checking that a holder answers must never look like a probe.
// Answers come as claims to WatchClaims on iface, which must be running
// already. It fails, sending nothing, when iface has no address to ask
// from: no IPv4 address for an IPv4 ip, no link-local one for IPv6.
func (a *Announcer) Ask(iface string, ip netip.Addr) error {
	if err := a.out.ask(iface, ip.Unmap()); err != nil {
		return fmt.Errorf("ask for %s on %s: %w", ip, iface, err)
	}
	a.sent.Add(1)
	return nil
}

// errNoSource: the interface has no address to ask from.
var errNoSource = errors.New("the interface has no address to ask from")

func (s *rawSender) ask(iface string, ip netip.Addr) error {
	src, err := s.source(iface, ip.Is4())
	if err != nil {
		return err
	}
	_, err = s.write(iface, func(mac net.HardwareAddr) ([][]byte, error) {
		f, err := askFrame(mac, src, ip)
		return [][]byte{f}, err
	})
	return err
}

// sourceTTL is how long the link-local address found for an interface is
// used before it is looked up again.
const sourceTTL = 30 * time.Second

type askSource struct {
	addr netip.Addr
	at   time.Time
}

// source is the address iface asks from: its primary IPv4 address (one
// ioctl), or its link-local IPv6 address, looked up by a dump of iface's
// IPv6 addresses at most once in sourceTTL, since a node holding
// thousands of IPv6 addresses on iface would otherwise list them all for
// every question.
func (s *rawSender) source(iface string, v4 bool) (netip.Addr, error) {
	if s.err != nil {
		return netip.Addr{}, s.err
	}
	if v4 {
		return s.primaryIPv4(iface)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.sources[iface]; ok && time.Since(c.at) < sourceTTL {
		return c.addr, nil
	}
	index, _, err := s.linkOf(iface)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("find link: %w", err)
	}
	if s.dumper == nil {
		if s.dumper, err = openAddrDumper(s.ns); err != nil {
			return netip.Addr{}, err
		}
	}
	var src netip.Addr
	err = s.dumper.list(index, unix.AF_INET6, func(addrs []ifAddr) {
		for _, a := range addrs {
			if a.link == index && a.prefix.Addr().IsLinkLocalUnicast() {
				src = a.prefix.Addr()
				return
			}
		}
	})
	if err != nil {
		return netip.Addr{}, err
	}
	if !src.IsValid() {
		return netip.Addr{}, errNoSource
	}
	s.sources[iface] = askSource{addr: src, at: time.Now()}
	return src, nil
}

// primaryIPv4 is the first IPv4 address of iface (SIOCGIFADDR): the
// node's own address where eip's addresses were added after it.
func (s *rawSender) primaryIPv4(iface string) (netip.Addr, error) {
	req, err := newIfreq(iface)
	if err != nil {
		return netip.Addr{}, err
	}
	if err := s.ioctl(unix.SIOCGIFADDR, &req); err != nil {
		if errors.Is(err, unix.EADDRNOTAVAIL) {
			return netip.Addr{}, errNoSource
		}
		return netip.Addr{}, err
	}
	// ifr_addr: a sockaddr_in, its family, port, then the address.
	if binary.NativeEndian.Uint16(req.union[:2]) != unix.AF_INET {
		return netip.Addr{}, errNoSource
	}
	return netip.AddrFrom4([4]byte(req.union[4:8])), nil
}
