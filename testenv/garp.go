package testenv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// SendGARP sends count gratuitous ARP requests for ip from the eth0 of the
// namespace name (ControlPlane, Client or a node), gap apart: what a LAN
// host that starts using ip announces.
func (c *Cluster) SendGARP(ctx context.Context, name string, ip netip.Addr, count int, gap time.Duration) error {
	e, err := c.endpoint(name)
	if err != nil {
		return err
	}
	if !ip.Is4() {
		return fmt.Errorf("send garp: %s is not IPv4", ip)
	}
	var conn *packet.Conn
	var mac net.HardwareAddr
	err = e.ns.do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr
		conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("send garp from %s: %w", name, err)
	}
	defer conn.Close()
	frame := garpFrame(mac, ip)
	broadcast := &packet.Addr{HardwareAddr: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for i := range count {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(gap):
			}
		}
		if _, err := conn.WriteTo(frame, broadcast); err != nil {
			return fmt.Errorf("send garp from %s: %w", name, err)
		}
	}
	return nil
}

// garpFrame is an Ethernet broadcast ARP request from mac whose sender and
// target address are both ip.
func garpFrame(mac net.HardwareAddr, ip netip.Addr) []byte {
	f := make([]byte, 14+28)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], mac)
	binary.BigEndian.PutUint16(f[12:14], unix.ETH_P_ARP)
	a := f[14:]
	binary.BigEndian.PutUint16(a[0:2], 1) // Ethernet
	binary.BigEndian.PutUint16(a[2:4], unix.ETH_P_IP)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:8], 1) // request
	copy(a[8:14], mac)
	v4 := ip.As4()
	copy(a[14:18], v4[:])
	copy(a[24:28], v4[:])
	return f
}

// Announcements counts, per sender MAC, the ARP frames seen on the eth0
// of a namespace that announce one IP: requests and replies whose sender
// address is that IP. A probe (sender 0.0.0.0) claims nothing and is not
// counted; neither is a request for the IP from another address.
type Announcements struct {
	conn *packet.Conn
	ip   [4]byte
}

// ListenAnnouncements starts counting announcements of ip on the eth0 of
// the namespace name; frames are queued from the moment it returns.
func (c *Cluster) ListenAnnouncements(name string, ip netip.Addr) (*Announcements, error) {
	e, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	if !ip.Is4() {
		return nil, fmt.Errorf("listen for announcements: %s is not IPv4", ip)
	}
	a := &Announcements{ip: ip.As4()}
	if a.conn, err = e.ns.listenPacket(packet.Raw, unix.ETH_P_ARP); err != nil {
		return nil, fmt.Errorf("listen for announcements in %s: %w", name, err)
	}
	return a, nil
}

// listenPacket opens a packet socket of the protocol on the namespace's
// eth0.
func (n *namespace) listenPacket(t packet.Type, proto int) (*packet.Conn, error) {
	var conn *packet.Conn
	err := n.do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, t, proto, nil)
		return err
	})
	return conn, err
}

// Count reads for d and returns the announcements seen since the listener
// started, per sender MAC, then closes the listener.
func (a *Announcements) Count(d time.Duration) (map[string]int, error) {
	heard, err := a.Record(d)
	out := map[string]int{}
	for _, h := range heard {
		out[h.MAC.String()]++
	}
	return out, err
}

// Heard is one announcement: who sent it, and when it was read.
type Heard struct {
	MAC net.HardwareAddr
	At  time.Time
}

// Record reads for d and returns the announcements seen since the
// listener started, in order, then closes the listener.
func (a *Announcements) Record(d time.Duration) ([]Heard, error) {
	defer a.conn.Close()
	if err := a.conn.SetReadDeadline(time.Now().Add(d)); err != nil {
		return nil, err
	}
	var out []Heard
	buf := make([]byte, 1500)
	for {
		n, _, err := a.conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("listen for announcements: %w", err)
		}
		// Raw frames: the Ethernet header, then the ARP packet.
		if n < 14+28 {
			continue
		}
		arp := buf[14:n]
		if [4]byte(arp[14:18]) == a.ip {
			out = append(out, Heard{MAC: slices.Clone(net.HardwareAddr(arp[8:14])), At: time.Now()})
		}
	}
}
