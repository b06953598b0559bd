package netif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
)

// writeTimeout bounds one frame write; a full transmit queue must not stall
// the caller (who may be about to unbind).
const writeTimeout = time.Second

// Announcer tells the LAN that this machine now holds an address: a
// gratuitous ARP request and reply for IPv4, an unsolicited override
// neighbour advertisement for IPv6. It is safe for concurrent use.
type Announcer struct {
	log     *slog.Logger
	clk     clock.WithTicker
	repeats []time.Duration
	out     sender
	sent    atomic.Uint64

	// mu is held around every send, so that once Stop returns no
	// announcement for that address is in flight or pending.
	mu      sync.Mutex
	pending map[netip.Addr]*schedule
	// queues[k] holds the schedules whose next repeat is repeats[k], in
	// the order they fall due: every schedule repeats at the same offsets
	// from its start, and starts only grow. A schedule stopped or
	// replaced since it was queued is skipped when it comes up.
	queues [][]*schedule
	closed bool

	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// sender puts the announcement frames for each of ips on iface and says
// how many packets left.
type sender interface {
	send(iface string, ips ...netip.Addr) (int, error)
	// probe sends one probe for ip (probeFrame).
	probe(iface string, ip netip.Addr) error
	// ask sends one request for ip from an address of iface's (askFrame).
	ask(iface string, ip netip.Addr) error
	close()
}

type schedule struct {
	ip    netip.Addr
	iface string
	start time.Time
	step  int // index of the next repeat
}

// at is when s's next repeat falls due.
func (a *Announcer) at(s *schedule) time.Time { return s.start.Add(a.repeats[s.step]) }

// maxBatch bounds the repeats sent at once, in one link lookup and one
// system call per interface, while Announce and Stop wait.
const maxBatch = 64

// NewAnnouncer returns an announcer for the calling thread's network
// namespace. After the first announcement of an address it repeats it at
// each of repeats, measured from the first (e.g. 250ms, 1s, 2s, 4s), timed by
// clk. It runs a goroutine until Close.
func NewAnnouncer(log *slog.Logger, clk clock.WithTicker, repeats []time.Duration) *Announcer {
	return newAnnouncer(log, clk, repeats, newRawSender(log))
}

func newAnnouncer(log *slog.Logger, clk clock.WithTicker, repeats []time.Duration, out sender) *Announcer {
	a := &Announcer{
		log:     log,
		clk:     clk,
		repeats: slices.Sorted(slices.Values(repeats)),
		out:     out,
		pending: map[netip.Addr]*schedule{},
		queues:  make([][]*schedule, len(repeats)),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go a.run()
	return a
}

// Announce sends the first announcement of ip on iface before it returns,
// then schedules the repeats, replacing any pending for ip. Repeats are
// scheduled even when the first send fails (the link may be back in a
// moment); their failures are logged.
func (a *Announcer) Announce(iface string, ip netip.Addr) error {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return fmt.Errorf("announce %s on %s: invalid address", ip, iface)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("announce %s on %s: announcer closed", ip, iface)
	}
	n, err := a.out.send(iface, ip)
	a.sent.Add(uint64(n))
	if len(a.repeats) > 0 {
		s := &schedule{ip: ip, iface: iface, start: a.clk.Now()}
		a.pending[ip] = s
		a.enqueue(s)
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	if err != nil {
		return fmt.Errorf("announce %s on %s: %w", ip, iface, err)
	}
	return nil
}

// Defend sends the announcement of ip on iface once, with no repeats,
// leaving any pending repeats as they are: the one defence RFC 5227 §2.4
// (b) allows a host whose address another machine claimed.
func (a *Announcer) Defend(iface string, ip netip.Addr) error {
	if err := a.once(iface, ip.Unmap()); err != nil {
		return fmt.Errorf("defend %s on %s: %w", ip, iface, err)
	}
	return nil
}

// Reannounce sends the announcement of each of ips on iface once, in one
// batch and without repeats, leaving any pending repeats as they are: the
// periodic announcement of addresses held for some time, for routers that
// keep a stale entry until it ages out (announce-interval).
func (a *Announcer) Reannounce(iface string, ips ...netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = ip.Unmap()
	}
	if err := a.once(iface, out...); err != nil {
		return fmt.Errorf("announce %d addresses again on %s (%s first): %w", len(ips), iface, ips[0], err)
	}
	return nil
}

// once sends the announcements of ips on iface, once each.
func (a *Announcer) once(iface string, ips ...netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return errors.New("announcer closed")
	}
	n, err := a.out.send(iface, ips...)
	a.sent.Add(uint64(n))
	return err
}

// Probe asks the LAN once whether anyone holds ip, without claiming it (an
// ARP probe, or a duplicate address detection NS). Answers come as claims
// to WatchClaims on iface, which must be running already.
func (a *Announcer) Probe(iface string, ip netip.Addr) error {
	if err := a.out.probe(iface, ip.Unmap()); err != nil {
		return fmt.Errorf("probe %s on %s: %w", ip, iface, err)
	}
	a.sent.Add(1)
	return nil
}

// Stop cancels the pending repeats for ip. Once it returns, no announcement
// of ip is being sent or will be.
func (a *Announcer) Stop(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pending, ip.Unmap())
}

// Sent returns the number of packets sent so far.
func (a *Announcer) Sent() uint64 {
	return a.sent.Load()
}

// Close cancels every pending repeat, stops the goroutine and closes the
// sockets.
func (a *Announcer) Close() {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed = true
		clear(a.pending)
		clear(a.queues)
		a.mu.Unlock()
		close(a.stop)
		<-a.done
		a.out.close()
	})
}

// run sends repeats as they fall due.
func (a *Announcer) run() {
	defer close(a.done)
	for {
		now := a.clk.Now()
		next, ok := a.sendDue(now)
		if ok && !next.After(now) {
			continue // more than one batch was due
		}
		if !a.wait(next, ok, now) {
			return
		}
	}
}

// wait blocks until next (if any), a new announcement or Stop, and says
// whether to go on.
func (a *Announcer) wait(next time.Time, ok bool, now time.Time) bool {
	var fire <-chan time.Time
	if ok {
		timer := a.clk.NewTimer(next.Sub(now))
		defer timer.Stop()
		fire = timer.C()
	}
	select {
	case <-a.stop:
		return false
	case <-a.wake:
	case <-fire:
	}
	return true
}

// enqueue puts s in the queue of its next repeat, in the order they fall
// due. It goes last unless the clock went back.
func (a *Announcer) enqueue(s *schedule) {
	q := a.queues[s.step]
	at := a.at(s)
	i := len(q)
	for i > 0 && a.at(q[i-1]).After(at) {
		i--
	}
	a.queues[s.step] = slices.Insert(q, i, s)
}

// sendDue sends up to maxBatch repeats due at now, earliest first, each
// interface's in one go, and says when the next repeat falls due.
func (a *Announcer) sendDue(now time.Time) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var due []*schedule
	for k := range a.queues {
		q := a.queues[k]
		for len(q) > 0 && len(due) < maxBatch {
			s := q[0]
			if a.pending[s.ip] == s && a.at(s).After(now) {
				break
			}
			q[0] = nil
			q = q[1:]
			if a.pending[s.ip] == s {
				due = append(due, s)
			}
		}
		a.queues[k] = q
	}
	slices.SortStableFunc(due, func(x, y *schedule) int { return a.at(x).Compare(a.at(y)) })
	for len(due) > 0 {
		iface := due[0].iface
		var ips []netip.Addr
		var rest []*schedule
		for _, s := range due {
			if s.iface == iface {
				ips = append(ips, s.ip)
				a.repeated(s)
			} else {
				rest = append(rest, s)
			}
		}
		n, err := a.out.send(iface, ips...)
		a.sent.Add(uint64(n))
		if err != nil {
			a.log.Warn("repeat announcements failed", "iface", iface, "ips", len(ips), "first", ips[0], "err", err)
		}
		due = rest
	}
	return a.nextDue()
}

// repeated moves s to its next repeat, or ends it after the last.
func (a *Announcer) repeated(s *schedule) {
	s.step++
	if s.step == len(a.repeats) {
		delete(a.pending, s.ip)
		return
	}
	a.enqueue(s)
}

// nextDue is when the earliest queued repeat falls due, dropping the
// stopped and replaced schedules at the queues' heads.
func (a *Announcer) nextDue() (time.Time, bool) {
	var next time.Time
	for k, q := range a.queues {
		for len(q) > 0 && a.pending[q[0].ip] != q[0] {
			q[0] = nil
			q = q[1:]
		}
		a.queues[k] = q
		if len(q) > 0 && (next.IsZero() || a.at(q[0]).Before(next)) {
			next = a.at(q[0])
		}
	}
	return next, !next.IsZero()
}

// rawSender writes announcement frames on AF_PACKET sockets, one per
// interface, opened on first use and kept.
type rawSender struct {
	log *slog.Logger
	ns  netNamespace
	// ioctlFD is a datagram socket in ns that names its interfaces to
	// ioctl (linkOf).
	ioctlFD int
	err     error // a failed construction, returned by every send

	mu    sync.Mutex
	conns map[string]*linkConn
	// dumper lists an interface's IPv6 addresses for sources, the
	// link-local address each interface asks from (source), opened on
	// first use.
	dumper  *addrDumper
	sources map[string]askSource
}

type linkConn struct {
	index int
	conn  *packet.Conn
}

func newRawSender(log *slog.Logger) *rawSender {
	s := &rawSender{log: log, conns: map[string]*linkConn{}, sources: map[string]askSource{}}
	s.ns, s.err = currentNetNamespace()
	if s.err != nil {
		return s
	}
	s.err = s.ns.do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		s.ioctlFD = fd
		return err
	})
	if s.err != nil {
		s.err = fmt.Errorf("open socket for interface lookups: %w", s.err)
		_ = s.ns.close()
	}
	return s
}

// linkOf is iface's index and MAC. Every frame looks the link up, so that
// a changed MAC or a recreated interface is announced correctly; two
// ioctls do it where a netlink dump of the link, with all its attributes
// parsed, cost more than the frames (seven per IP bound: probes and
// announcements) at a cold start of thousands.
func (s *rawSender) linkOf(iface string) (int, net.HardwareAddr, error) {
	req, err := newIfreq(iface)
	if err != nil {
		return 0, nil, err
	}
	if err := s.ioctl(unix.SIOCGIFINDEX, &req); err != nil {
		return 0, nil, err
	}
	index := int(int32(binary.NativeEndian.Uint32(req.union[:4]))) // ifr_ifindex
	if err := s.ioctl(unix.SIOCGIFHWADDR, &req); err != nil {
		return 0, nil, err
	}
	// ifr_hwaddr: a sockaddr, its family the link type, then the address.
	if family := binary.NativeEndian.Uint16(req.union[:2]); family != unix.ARPHRD_ETHER {
		return 0, nil, fmt.Errorf("link type %d has no Ethernet link layer", family)
	}
	return index, slices.Clone(net.HardwareAddr(req.union[2:8])), nil
}

// ifreq is struct ifreq: a name, then a union of what each ioctl reads or
// writes.
type ifreq struct {
	name  [unix.IFNAMSIZ]byte
	union [24]byte
}

// newIfreq is a request naming iface.
func newIfreq(iface string) (ifreq, error) {
	var req ifreq
	if len(iface) >= len(req.name) {
		return req, fmt.Errorf("interface name %q too long", iface)
	}
	copy(req.name[:], iface)
	return req, nil
}

func (s *rawSender) ioctl(req uint, r *ifreq) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.ioctlFD), uintptr(req), uintptr(unsafe.Pointer(r))); errno != 0 {
		return os.NewSyscallError("ioctl", errno)
	}
	return nil
}

// send looks the link up once for every call, so that a changed MAC or a
// recreated interface is announced correctly, and puts the frames of all
// of ips on the wire in one system call.
func (s *rawSender) send(iface string, ips ...netip.Addr) (int, error) {
	return s.write(iface, func(mac net.HardwareAddr) ([][]byte, error) {
		var frames [][]byte
		for _, ip := range ips {
			f, err := announcementFrames(mac, ip)
			if err != nil {
				return nil, err
			}
			frames = append(frames, f...)
		}
		return frames, nil
	})
}

func (s *rawSender) probe(iface string, ip netip.Addr) error {
	_, err := s.write(iface, func(mac net.HardwareAddr) ([][]byte, error) {
		f, err := probeFrame(mac, ip)
		return [][]byte{f}, err
	})
	return err
}

// write puts the frames build makes for iface's MAC on iface, and says how
// many left.
func (s *rawSender) write(iface string, build func(net.HardwareAddr) ([][]byte, error)) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	index, mac, err := s.linkOf(iface)
	if err != nil {
		return 0, fmt.Errorf("find link: %w", err)
	}
	frames, err := build(mac)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.conn(iface, index)
	if err != nil {
		return 0, err
	}
	n, err := sendFrames(c, index, frames)
	if err != nil {
		s.dropLocked(iface)
		return n, fmt.Errorf("send: %w", err)
	}
	return n, nil
}

// sendFrames writes frames on c, bound to the link with index, with as few
// sendmmsg calls as the socket's buffer allows, each frame to the
// Ethernet destination it names; a full transmit queue is waited for up to
// writeTimeout. It says how many frames left.
func sendFrames(c *packet.Conn, index int, frames [][]byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return 0, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	addrs := make([]unix.RawSockaddrLinklayer, len(frames))
	iovs := make([]unix.Iovec, len(frames))
	msgs := make([]mmsghdr, len(frames))
	for i, f := range frames {
		if len(f) < 6 {
			return 0, fmt.Errorf("frame of %d bytes", len(f))
		}
		addrs[i] = unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Ifindex: int32(index), Halen: 6}
		copy(addrs[i].Addr[:], f[:6])
		iovs[i].Base = &f[0]
		iovs[i].SetLen(len(f))
		msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&addrs[i]))
		msgs[i].hdr.Namelen = unix.SizeofSockaddrLinklayer
		msgs[i].hdr.Iov = &iovs[i]
		msgs[i].hdr.SetIovlen(1)
	}
	sent := 0
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		for sent < len(msgs) {
			n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&msgs[sent])), uintptr(len(msgs)-sent), 0, 0, 0)
			switch {
			case errno == unix.EAGAIN:
				return false // wait until the socket is writable
			case errno == unix.EINTR:
			case errno != 0:
				serr = os.NewSyscallError("sendmmsg", errno)
				return true
			default:
				sent += int(n)
			}
		}
		return true
	})
	return sent, errors.Join(err, serr)
}

// mmsghdr is struct mmsghdr: a message and the bytes sendmmsg sent of it.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// conn returns the socket for iface, reopening it when the name now belongs
// to another interface. The socket binds protocol 0, so it receives nothing.
func (s *rawSender) conn(iface string, index int) (*packet.Conn, error) {
	if lc, ok := s.conns[iface]; ok {
		if lc.index == index {
			return lc.conn, nil
		}
		s.dropLocked(iface)
	}
	var c *packet.Conn
	err := s.ns.do(func() error {
		var err error
		c, err = packet.Listen(&net.Interface{Index: index, Name: iface}, packet.Raw, 0, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open packet socket: %w", err)
	}
	s.conns[iface] = &linkConn{index: index, conn: c}
	return c, nil
}

func (s *rawSender) dropLocked(iface string) {
	if lc, ok := s.conns[iface]; ok {
		_ = lc.conn.Close()
		delete(s.conns, iface)
	}
}

func (s *rawSender) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for iface := range s.conns {
		s.dropLocked(iface)
	}
	if s.dumper != nil {
		s.dumper.close()
	}
	if s.err == nil {
		_ = unix.Close(s.ioctlFD)
		_ = s.ns.close()
		s.err = errors.New("announcer closed")
	}
}
