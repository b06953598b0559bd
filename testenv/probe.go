package testenv

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	// DefaultProbeInterval is the interval Probe uses when given 0.
	DefaultProbeInterval = 10 * time.Millisecond
	// replyGrace is how long Stop still listens for replies in flight.
	replyGrace = 50 * time.Millisecond
)

// Probe pings one address from the client namespace and records who
// answers. The requests go through the client's own routing and neighbour
// cache, exactly like any host's traffic on the LAN; the replies are read
// from a packet socket to see the Ethernet source of each.
type Probe struct {
	id       uint16
	send     *icmp.PacketConn
	recv     *packet.Conn
	stopc    chan struct{}
	sendDone chan struct{}
	recvDone chan struct{}
	stopOnce sync.Once
	onStop   func(*Probe)

	mu    sync.Mutex
	res   ProbeResult
	sends []time.Time // by sequence number
}

// Probe starts pinging target from the client every interval
// (DefaultProbeInterval if 0) until Stop, or until the cluster closes.
func (c *Cluster) Probe(target netip.Addr, interval time.Duration) (*Probe, error) {
	return c.probeFrom(c.cl.ns, target, interval)
}

// RoutedProbe is Probe from the routed client (Options.Router): its
// replies all come from the router's MAC, so it measures reachability and
// gaps, not which node answered.
func (c *Cluster) RoutedProbe(target netip.Addr, interval time.Duration) (*Probe, error) {
	if c.rcl == nil {
		return nil, fmt.Errorf("probe %s: cluster %s has no router (Options.Router)", target, c.id)
	}
	return c.probeFrom(c.rcl, target, interval)
}

func (c *Cluster) probeFrom(ns *namespace, target netip.Addr, interval time.Duration) (*Probe, error) {
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	var idb [2]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, fmt.Errorf("probe %s: %w", target, err)
	}
	p := &Probe{
		id:       binary.BigEndian.Uint16(idb[:]),
		stopc:    make(chan struct{}),
		sendDone: make(chan struct{}),
		recvDone: make(chan struct{}),
		res:      ProbeResult{Target: target, Interval: interval},
	}
	if err := ns.do(p.open); err != nil {
		return nil, fmt.Errorf("probe %s: %w", target, err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		p.close()
		return nil, fmt.Errorf("probe %s: cluster closed", target)
	}
	c.probes[p] = struct{}{}
	p.onStop = func(p *Probe) {
		c.mu.Lock()
		delete(c.probes, p)
		c.mu.Unlock()
	}
	c.mu.Unlock()
	go p.receive()
	go p.transmit()
	return p, nil
}

// open creates the sockets; it runs inside the client namespace.
func (p *Probe) open() error {
	ifi, err := net.InterfaceByName("eth0")
	if err != nil {
		return err
	}
	network, laddr, etherType := "ip4:icmp", "0.0.0.0", etherTypeIPv4
	if p.res.Target.Is6() {
		network, laddr, etherType = "ip6:ipv6-icmp", "::", etherTypeIPv6
	}
	if p.send, err = icmp.ListenPacket(network, laddr); err != nil {
		return err
	}
	// The raw socket is only for sending: let it receive nothing, so that
	// its buffer never fills.
	if p.res.Target.Is4() {
		err = p.send.IPv4PacketConn().SetBPF([]bpf.RawInstruction{{Op: 0x06}}) // ret #0
	} else {
		var f ipv6.ICMPFilter
		f.SetAll(true)
		err = p.send.IPv6PacketConn().SetICMPFilter(&f)
	}
	if err != nil {
		p.send.Close()
		return err
	}
	if p.recv, err = packet.Listen(ifi, packet.Raw, etherType, nil); err != nil {
		p.send.Close()
		return err
	}
	return nil
}

func (p *Probe) close() {
	p.send.Close()
	p.recv.Close()
}

func (p *Probe) transmit() {
	defer close(p.sendDone)
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if p.res.Target.Is6() {
		typ = ipv6.ICMPTypeEchoRequest
	}
	dst := &net.IPAddr{IP: p.res.Target.AsSlice()}
	tick := time.NewTicker(p.res.Interval)
	defer tick.Stop()
	for {
		p.mu.Lock()
		seq := p.res.Sent
		p.res.Sent++
		now := time.Now()
		if seq == 0 {
			p.res.Start = now
		}
		p.sends = append(p.sends, now)
		p.mu.Unlock()
		msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: int(p.id), Seq: int(uint16(seq)), Data: make([]byte, 16)}}
		if b, err := msg.Marshal(nil); err == nil {
			// An unreachable target is what the probe measures, not an error.
			_, _ = p.send.WriteTo(b, dst)
		}
		select {
		case <-p.stopc:
			return
		case <-tick.C:
		}
	}
}

func (p *Probe) receive() {
	defer close(p.recvDone)
	buf := make([]byte, 2048)
	for {
		n, _, err := p.recv.ReadFrom(buf)
		if err != nil {
			return // closed by Stop
		}
		at := time.Now()
		mac, seq16, ok := parseEchoReply(buf[:n], p.res.Target, p.id)
		if !ok {
			continue
		}
		p.mu.Lock()
		last := p.res.Sent - 1
		seq := last - int(uint16(last)-seq16)
		if seq >= 0 {
			p.res.Replies = append(p.res.Replies, Reply{At: at, Seq: seq, MAC: mac, RTT: at.Sub(p.sends[seq])})
		}
		p.mu.Unlock()
	}
}

// Result returns what the probe has seen so far; End is now.
func (p *Probe) Result() ProbeResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.res
	r.Replies = append([]Reply(nil), p.res.Replies...)
	if r.End.IsZero() {
		r.End = time.Now()
	}
	return r
}

// Stop stops sending, waits briefly for replies in flight, and returns the
// result. Calling it again returns the same result.
func (p *Probe) Stop() ProbeResult {
	p.stopOnce.Do(func() {
		close(p.stopc)
		<-p.sendDone
		p.mu.Lock()
		p.res.End = time.Now()
		p.mu.Unlock()
		grace := time.NewTimer(replyGrace)
		<-grace.C
		p.close()
		<-p.recvDone
		if p.onStop != nil {
			p.onStop(p)
		}
	})
	return p.Result()
}

// parseEchoReply recognises an Ethernet frame carrying an ICMP or ICMPv6
// echo reply from target to a request with the given id, and returns the
// frame's source MAC and the reply's sequence number.
func parseEchoReply(frame []byte, target netip.Addr, id uint16) (net.HardwareAddr, uint16, bool) {
	const ethLen = 14
	if len(frame) < ethLen {
		return nil, 0, false
	}
	etherType := binary.BigEndian.Uint16(frame[12:14])
	ip := frame[ethLen:]
	var src netip.Addr
	var icmpMsg []byte
	var replyType byte
	switch {
	case etherType == etherTypeIPv4 && target.Is4():
		if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 1 {
			return nil, 0, false
		}
		ihl := int(ip[0]&0x0f) * 4
		if len(ip) < ihl+8 {
			return nil, 0, false
		}
		src = netip.AddrFrom4([4]byte(ip[12:16]))
		icmpMsg, replyType = ip[ihl:], 0
	case etherType == etherTypeIPv6 && target.Is6():
		if len(ip) < 48 || ip[0]>>4 != 6 || ip[6] != 58 {
			return nil, 0, false
		}
		src = netip.AddrFrom16([16]byte(ip[8:24]))
		icmpMsg, replyType = ip[40:], 129
	default:
		return nil, 0, false
	}
	if src != target || icmpMsg[0] != replyType || icmpMsg[1] != 0 || binary.BigEndian.Uint16(icmpMsg[4:6]) != id {
		return nil, 0, false
	}
	mac := make(net.HardwareAddr, 6)
	copy(mac, frame[6:12])
	return mac, binary.BigEndian.Uint16(icmpMsg[6:8]), true
}
