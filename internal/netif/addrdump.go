package netif

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// addrDumper lists addresses over a netlink socket of its own, on which
// the kernel checks requests strictly (NETLINK_GET_STRICT_CHK, Linux 4.20
// and later): a dump that names an interface then carries only that
// interface's addresses. netlink.Handle.AddrList names none, so every
// listing of any interface received every address of the node, eipd's
// device's thousands included, and dropped the others here.
//
// Answers are read into one buffer kept with the socket and parsed where
// they lie, into a slice of ifAddr kept too: the library's socket
// allocated 64 KiB for every read and a message header for every address,
// and a listing of eipd's device holding 3,334 addresses, which the agent
// makes every resync period, allocated 1.7 MB.
type addrDumper struct {
	ns netNamespace
	// strict says the kernel filters by interface; without it the dump
	// carries every interface's addresses, and the filter here is all.
	// Set when the dumper is opened.
	strict bool

	// mu serializes dumps, which own what follows.
	mu sync.Mutex
	// fd is the socket, -1 after an exchange that failed left it out of
	// step with its requests (the next dump opens another); port is its
	// netlink port, seq the last request's number.
	fd        int
	port, seq uint32
	rb        []byte
	addrs     []ifAddr
}

// dumpReadSize is the receive buffer: the kernel fills a dump's datagrams
// up to 32 KiB, or to the size of the reads it has seen.
const dumpReadSize = 64 << 10

// openAddrDumper opens the socket in ns.
func openAddrDumper(ns netNamespace) (*addrDumper, error) {
	d := &addrDumper{ns: ns, fd: -1, rb: make([]byte, dumpReadSize)}
	if err := d.open(); err != nil {
		return nil, err
	}
	d.strict = unix.SetsockoptInt(d.fd, unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1) == nil
	return d, nil
}

// open opens the socket; under strict checking if the dumper found it.
func (d *addrDumper) open() error {
	fd, err := openRouteSocket(d.ns)
	if err != nil {
		return err
	}
	sa, err := unix.Getsockname(fd)
	if err == nil && d.strict {
		err = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1)
	}
	if err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("set up netlink socket: %w", err)
	}
	d.fd, d.port = fd, sa.(*unix.SockaddrNetlink).Pid
	return nil
}

func (d *addrDumper) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		_ = unix.Close(d.fd)
		d.fd = -1
	}
}

// list calls use with the addresses of family fam (netlink.FAMILY_ALL:
// both) on the interface with that index, or on every interface for index
// 0; the slice is the dumper's, valid during the call only. An interface
// that is gone is unix.ENODEV under strict checking, and has no addresses
// otherwise.
func (d *addrDumper) list(index, fam int, use func([]ifAddr)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	addrs, err := dump(func() ([]ifAddr, error) { return d.dumpOnce(index, fam) })
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	use(addrs)
	return nil
}

// dumpOnce sends one RTM_GETADDR dump request and reads its answers into
// d.addrs, netlink.ErrDumpInterrupted if the kernel marked them as
// interrupted by a change.
func (d *addrDumper) dumpOnce(index, fam int) ([]ifAddr, error) {
	if d.fd < 0 {
		if err := d.open(); err != nil {
			return nil, err
		}
	}
	d.seq++
	var req [unix.SizeofNlMsghdr + unix.SizeofIfAddrmsg]byte
	native := binary.NativeEndian
	native.PutUint32(req[0:], uint32(len(req)))
	native.PutUint16(req[4:], unix.RTM_GETADDR)
	native.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	native.PutUint32(req[8:], d.seq)
	req[unix.SizeofNlMsghdr] = byte(fam)
	native.PutUint32(req[unix.SizeofNlMsghdr+4:], uint32(index))
	if _, err := unix.Write(d.fd, req[:]); err != nil {
		return nil, d.reset(fmt.Errorf("send: %w", err))
	}
	d.addrs = d.addrs[:0]
	interrupted := false
	for {
		n, from, err := unix.Recvfrom(d.fd, d.rb, unix.MSG_TRUNC)
		if err != nil {
			return nil, d.reset(fmt.Errorf("receive: %w", err))
		}
		if n > len(d.rb) {
			err := fmt.Errorf("receive: a datagram of %d bytes, more than the %d read", n, len(d.rb))
			d.rb = make([]byte, n)
			return nil, d.reset(err)
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // not from the kernel
		}
		for b := d.rb[:n]; len(b) >= unix.SizeofNlMsghdr; {
			size := int(native.Uint32(b))
			if size < unix.SizeofNlMsghdr || size > len(b) {
				return nil, d.reset(fmt.Errorf("receive: a message of %d bytes in %d", size, len(b)))
			}
			typ, flags := native.Uint16(b[4:]), native.Uint16(b[6:])
			seq, port := native.Uint32(b[8:]), native.Uint32(b[12:])
			m := b[unix.SizeofNlMsghdr:size]
			b = b[min(nlmAlign(size), len(b)):]
			if seq != d.seq || port != d.port {
				continue // an answer to an earlier request
			}
			interrupted = interrupted || flags&unix.NLM_F_DUMP_INTR != 0
			switch typ {
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				if len(m) >= 4 {
					if errno := int32(native.Uint32(m)); errno != 0 {
						// EBUSY: another dump is under way on the socket.
						return nil, d.reset(unix.Errno(-errno))
					}
				}
				flags &^= unix.NLM_F_MULTI
			case unix.RTM_NEWADDR:
				ia, ok := parseIfAddr(m)
				if ok && (index == 0 || ia.link == index) && (fam == netlink.FAMILY_ALL || family(ia.prefix.Addr()) == fam) {
					d.addrs = append(d.addrs, ia)
				}
			}
			if flags&unix.NLM_F_MULTI == 0 {
				if interrupted {
					return nil, netlink.ErrDumpInterrupted
				}
				return d.addrs, nil
			}
		}
	}
}

// reset closes a socket whose answers may be out of step with its
// requests (a dump left half read makes the kernel refuse the next one);
// the next dump opens another.
func (d *addrDumper) reset(err error) error {
	_ = unix.Close(d.fd)
	d.fd = -1
	return err
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

func nlmAlign(n int) int {
	return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
}
