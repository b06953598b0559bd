package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// AddLatency delays every frame leaving the namespace of name (ControlPlane,
// Client or a node name) by d, like `tc qdisc add dev eth0 root netem delay
// d`, which this machine's kernel lacks. d = 0 removes the delay. The
// namespace's port is taken off the bridge and a relay in the test process
// forwards frames between it and a new port on the bridge; the switch-over
// loses the frames in flight.
func (c *Cluster) AddLatency(ctx context.Context, name string, d time.Duration) error {
	e, err := c.endpoint(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("add latency to %s: cluster closed", name)
	}
	if dl := c.delays[name]; dl != nil {
		dl.delay.Store(int64(d))
		c.mu.Unlock()
		if d == 0 {
			return c.removeDelayLine(ctx, name)
		}
		return nil
	}
	c.mu.Unlock()
	if d == 0 {
		return nil
	}
	dl, err := newDelayLine(ctx, c.lan, e.port, d)
	if err != nil {
		return fmt.Errorf("add latency to %s: %w", name, err)
	}
	c.mu.Lock()
	c.delays[name] = dl
	c.mu.Unlock()
	return nil
}

func (c *Cluster) removeDelayLine(ctx context.Context, name string) error {
	c.mu.Lock()
	dl := c.delays[name]
	delete(c.delays, name)
	c.mu.Unlock()
	dl.stop()
	if err := dl.restore(ctx); err != nil {
		return fmt.Errorf("remove latency from %s: %w", name, err)
	}
	return nil
}

// delayLine relays Ethernet frames between a port taken off the bridge and
// a veth pair whose other end is on the bridge, holding the frames that
// leave the port's namespace for a delay.
type delayLine struct {
	lan       *namespace
	port      string // the namespace's original bridge port
	inner, sw string // the new veth pair: relay side, bridge side
	portConn  *packet.Conn
	innerConn *packet.Conn
	delay     atomic.Int64 // nanoseconds, changeable while the relay runs
	wg        sync.WaitGroup
	stopOnce  sync.Once
}

func newDelayLine(ctx context.Context, lan *namespace, port string, d time.Duration) (*delayLine, error) {
	dl := &delayLine{lan: lan, port: port, inner: port + "d", sw: port + "b"}
	dl.delay.Store(int64(d))
	ipLAN := func(args ...string) error { return run(ctx, nil, "ip", append([]string{"-n", lan.name}, args...)...) }
	if err := ipLAN("link", "add", dl.inner, "type", "veth", "peer", "name", dl.sw); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "set", dl.inner, "up"},
		{"link", "set", dl.sw, "master", "br0", "up"},
		{"link", "set", dl.port, "nomaster"},
	} {
		if err := ipLAN(args...); err != nil {
			return nil, errors.Join(err, dl.restore(ctx))
		}
	}
	if err := lan.do(func() error {
		var err error
		if dl.portConn, err = openRelaySocket(dl.port); err != nil {
			return err
		}
		if dl.innerConn, err = openRelaySocket(dl.inner); err != nil {
			dl.portConn.Close()
			return err
		}
		return nil
	}); err != nil {
		return nil, errors.Join(err, dl.restore(ctx))
	}
	dl.wg.Add(2)
	go dl.relay(dl.portConn, dl.innerConn, func() time.Duration { return time.Duration(dl.delay.Load()) })
	go dl.relay(dl.innerConn, dl.portConn, func() time.Duration { return 0 })
	return dl, nil
}

// openRelaySocket opens a packet socket for every frame arriving on the
// interface, with virtio-net headers so that offloaded (GSO) frames pass
// through whole. It captures nothing until the headers are on, so no frame
// is read without one.
func openRelaySocket(iface string) (*packet.Conn, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	dropAll := []bpf.RawInstruction{{Op: 0x06}} // ret #0
	conn, err := packet.Listen(ifi, packet.Raw, unix.ETH_P_ALL, &packet.Config{Filter: dropAll})
	if err != nil {
		return nil, err
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = errors.Join(
			unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1),
			unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1),
		)
	}); err != nil || serr != nil {
		conn.Close()
		return nil, errors.Join(err, serr)
	}
	if err := conn.SetBPF([]bpf.RawInstruction{{Op: 0x06, K: 0xffffffff}}); err != nil { // ret #-1: accept
		conn.Close()
		return nil, err
	}
	return conn, nil
}

type heldFrame struct {
	b   []byte
	due time.Time
}

// relay forwards frames from one socket to the other, each after the delay
// current when it arrived. It ends when either socket is closed.
func (dl *delayLine) relay(from, to *packet.Conn, delay func() time.Duration) {
	defer dl.wg.Done()
	const vnetHdrLen = 10
	queue := make(chan heldFrame, 16384)
	done := make(chan struct{})
	go func() {
		defer close(done)
		timer := time.NewTimer(0)
		<-timer.C
		for f := range queue {
			if wait := time.Until(f.due); wait > 0 {
				timer.Reset(wait)
				<-timer.C
			}
			if len(f.b) < vnetHdrLen+14 {
				continue
			}
			dst := net.HardwareAddr(f.b[vnetHdrLen : vnetHdrLen+6])
			if _, err := to.WriteTo(f.b, &packet.Addr{HardwareAddr: dst}); isClosed(err) {
				return
			}
		}
	}()
	defer func() {
		close(queue)
		<-done
	}()
	for {
		buf := make([]byte, 65536+vnetHdrLen)
		n, _, err := from.ReadFrom(buf)
		if isClosed(err) {
			return
		}
		if err != nil {
			continue // e.g. ENETDOWN while the port is down (CutLink)
		}
		select {
		case queue <- heldFrame{b: buf[:n], due: time.Now().Add(delay())}:
		default: // a full queue drops, as a full qdisc would
		}
	}
}

// isClosed recognises the errors of a socket closed by stop.
func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EBADF)
}

func (dl *delayLine) stop() {
	dl.stopOnce.Do(func() {
		dl.portConn.Close()
		dl.innerConn.Close()
		dl.wg.Wait()
	})
}

// restore puts the port back on the bridge and deletes the relay's veths.
func (dl *delayLine) restore(ctx context.Context) error {
	return errors.Join(
		run(ctx, nil, "ip", "-n", dl.lan.name, "link", "set", dl.port, "master", "br0"),
		run(ctx, nil, "ip", "-n", dl.lan.name, "link", "del", dl.inner),
	)
}
