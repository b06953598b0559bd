package netif

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// linkCheckInterval is how often WatchClaims checks, while its link is down,
// that the link still exists.
const linkCheckInterval = time.Second

// Claim says a machine other than this one announced that it holds IP, from
// MAC, on Iface; or, with Probe, asked whether anyone holds it before it
// takes it (an ARP probe or a DAD neighbour solicitation). A Claim with
// Dropped > 0 names no IP: the kernel dropped that many frames on Iface,
// its socket full, before the watch could read them, so claims and
// answers may have gone unseen.
type Claim struct {
	Iface   string
	IP      netip.Addr
	MAC     net.HardwareAddr
	Probe   bool
	Dropped int
}

// WatchClaims reports, until ctx ends, every address another machine claims
// on iface (in the calling thread's network namespace): the sender of every
// ARP request or reply, the target of every neighbour advertisement and the
// source of every neighbour solicitation, and the target of every probe,
// unless the frame comes from iface's own MAC. It sees what reaches iface: broadcasts, ff02::1 and the
// solicited-node groups of the addresses bound there. The consumer decides
// which claims matter (those for addresses it holds), and may say so with
// want, called from the watch's goroutine: a claim for an address want
// refuses is dropped there, before it costs the consumer anything; nil
// wants every claim. It keeps watching
// while the link is down and after it comes back up. It returns nil when ctx
// ends, and an error if it cannot listen or the interface is deleted or
// replaced. backlog, if not nil, says while the watch runs whether it has
// frames not yet reported.
func WatchClaims(ctx context.Context, log *slog.Logger, iface string, want func(netip.Addr) bool, out chan<- Claim, backlog *Backlog) error {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("watch claims on %s: %w", iface, err)
	}
	filter, err := claimFilter(ifi.HardwareAddr)
	if err != nil {
		return fmt.Errorf("watch claims on %s: %w", iface, err)
	}
	conn, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, &packet.Config{Filter: filter})
	if err != nil {
		return fmt.Errorf("watch claims on %s: %w", iface, err)
	}
	defer conn.Close()
	// Unsolicited NAs go to all nodes; the kernel joins that group only
	// while IPv6 is enabled on the link.
	if err := conn.JoinGroup(allNodesMAC()); err != nil {
		log.Warn("cannot join the all-nodes group; IPv6 claims may go unseen", "iface", iface, "err", err)
	}
	stop := context.AfterFunc(ctx, func() {
		// Wakes the blocked read; the loop then sees ctx is done.
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	})
	defer stop()
	// setDeadline says false once ctx is done: AfterFunc's deadline must
	// not be overwritten.
	setDeadline := func(t time.Time) bool {
		_ = conn.SetReadDeadline(t)
		return ctx.Err() == nil
	}

	own := ifi.HardwareAddr
	frames, err := newFrameReader(conn, backlog)
	if err != nil {
		return fmt.Errorf("watch claims on %s: %w", iface, err)
	}
	backlog.attach(frames.rc)
	defer backlog.detach()
	linkDown := false
	for {
		n, err := frames.read()
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil && linkDown:
			linkDown = false
			if !setDeadline(time.Time{}) {
				return nil
			}
		case errors.Is(err, unix.ENETDOWN) || linkDown && errors.Is(err, os.ErrDeadlineExceeded):
			// The kernel detaches the socket when the link goes down and
			// reattaches it when it comes up, unless the link is deleted,
			// which it does not report again: check now and then.
			if err := sameLink(iface, ifi.Index); err != nil {
				return fmt.Errorf("watch claims on %s: %w", iface, err)
			}
			if !linkDown {
				log.Info("link down; watching for claims again once it is up", "iface", iface)
			}
			linkDown = true
			if !setDeadline(time.Now().Add(linkCheckInterval)) {
				return nil
			}
			continue
		case err != nil:
			return fmt.Errorf("watch claims on %s: %w", iface, err)
		}
		// The counter restarts at each read of it.
		if st, err := conn.Stats(); err == nil && st.Drops > 0 {
			log.Debug("frames dropped before the claim watch read them", "iface", iface, "dropped", st.Drops)
			select {
			case out <- Claim{Iface: iface, Dropped: int(st.Drops)}:
			case <-ctx.Done():
				return nil
			}
		}
		for i := range n {
			ip, mac, probe, ok := parseClaim(frames.frame(i), own)
			if !ok || want != nil && !want(ip) {
				continue
			}
			log.Debug("address claimed on the wire", "iface", iface, "ip", ip, "mac", mac.String(), "probe", probe)
			select {
			case out <- Claim{Iface: iface, IP: ip, MAC: slices.Clone(mac), Probe: probe}: // mac is in the frame's buffer
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// claimBatch is the most frames one read of the claim watch takes: at a
// cold start every node's probes and announcements reach every other
// node, and one system call and one wake-up for each was much of what the
// watch cost.
const claimBatch = 32

// frameReader reads the frames waiting on a packet socket with recvmmsg,
// each into a buffer of claimSnapLen bytes.
type frameReader struct {
	rc      syscall.RawConn
	backlog *Backlog
	bufs    [][claimSnapLen]byte
	iovs    []unix.Iovec
	msgs    []mmsghdr
}

func newFrameReader(c *packet.Conn, backlog *Backlog) (*frameReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &frameReader{rc: rc, backlog: backlog, bufs: make([][claimSnapLen]byte, claimBatch), iovs: make([]unix.Iovec, claimBatch), msgs: make([]mmsghdr, claimBatch)}
	for i := range r.msgs {
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(claimSnapLen)
		r.msgs[i].hdr.Iov = &r.iovs[i]
		r.msgs[i].hdr.SetIovlen(1)
	}
	return r, nil
}

// read waits for a frame, until the socket's read deadline, and takes it
// and those waiting behind it, up to claimBatch; it says how many.
func (r *frameReader) read() (int, error) {
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			r.backlog.setReading(true)
			got, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(len(r.msgs)), unix.MSG_DONTWAIT, 0, 0)
			switch errno {
			case 0:
				n = int(got)
				return true
			case unix.EINTR:
			case unix.EAGAIN:
				r.backlog.setReading(false)
				return false // wait until the socket is readable
			default:
				r.backlog.setReading(false)
				rerr = os.NewSyscallError("recvmmsg", errno)
				return true
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// frame is the i-th frame of the last read.
func (r *frameReader) frame(i int) []byte {
	return r.bufs[i][:min(int(r.msgs[i].len), claimSnapLen)]
}

// sameLink says whether iface is still the interface with index.
func sameLink(iface string, index int) error {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("link gone: %w", err)
	}
	if ifi.Index != index {
		return fmt.Errorf("link recreated (index %d, was %d)", ifi.Index, index)
	}
	return nil
}
