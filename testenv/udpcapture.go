package testenv

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// Captured is a UDP datagram a node sent: where to, and its payload.
type Captured struct {
	To      netip.AddrPort
	Payload []byte
}

// UDPCapture reads, off a node's eth0, the IPv4 UDP datagrams to a port
// that the node sends: what anyone on the LAN can record.
type UDPCapture struct {
	conn *packet.Conn
	from netip.Addr
	port uint16
}

// CaptureUDP starts capturing the IPv4 UDP datagrams to port that node
// sends; datagrams are queued from the moment it returns.
func (c *Cluster) CaptureUDP(node string, port uint16) (*UDPCapture, error) {
	n, err := c.nodeEndpoint(node)
	if err != nil {
		return nil, err
	}
	u := &UDPCapture{from: n.ipv4, port: port}
	// Every protocol: a packet socket sees what the host sends only when
	// it taps all of them.
	if u.conn, err = n.ns.listenPacket(packet.Datagram, unix.ETH_P_ALL); err != nil {
		return nil, fmt.Errorf("capture UDP port %d of %s: %w", port, node, err)
	}
	return u, nil
}

// Next returns the next datagram captured, waiting until deadline.
func (u *UDPCapture) Next(deadline time.Time) (Captured, error) {
	if err := u.conn.SetReadDeadline(deadline); err != nil {
		return Captured{}, err
	}
	buf := make([]byte, 65536)
	for {
		n, _, err := u.conn.ReadFrom(buf)
		if err != nil {
			return Captured{}, fmt.Errorf("capture UDP: %w", err)
		}
		if c, ok := u.parse(buf[:n]); ok {
			return c, nil
		}
	}
}

// parse reads a packet that may be IPv4: a UDP datagram from the node to
// the port.
func (u *UDPCapture) parse(p []byte) (Captured, bool) {
	if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_UDP {
		return Captured{}, false
	}
	ihl := int(p[0]&0x0f) * 4
	if len(p) < ihl+8 || netip.AddrFrom4([4]byte(p[12:16])) != u.from {
		return Captured{}, false
	}
	udp := p[ihl:]
	if binary.BigEndian.Uint16(udp[2:4]) != u.port {
		return Captured{}, false
	}
	size := int(binary.BigEndian.Uint16(udp[4:6]))
	if size < 8 || size > len(udp) {
		return Captured{}, false
	}
	to := netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[16:20])), u.port)
	return Captured{To: to, Payload: append([]byte(nil), udp[8:size]...)}, true
}

// Close stops capturing.
func (u *UDPCapture) Close() error { return u.conn.Close() }

// UDPFrom opens a UDP socket in the namespace name (Client, or a node) on
// its IPv4 address and port (0: any free port): datagrams sent on it carry
// that address, as a replay forged by anyone on the LAN would.
func (c *Cluster) UDPFrom(name string, port uint16) (*net.UDPConn, error) {
	n, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	var conn *net.UDPConn
	err = n.ns.do(func() error {
		var err error
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(n.ipv4, port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open UDP on %s port %d: %w", name, port, err)
	}
	return conn, nil
}
