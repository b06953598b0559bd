package testenv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
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

// CountAnnouncements listens on the eth0 of the namespace name for d and
// counts, per sender MAC, the ARP frames that announce ip: requests and
// replies whose sender address is ip. A probe (sender 0.0.0.0) claims
// nothing and is not counted; neither is a request for ip from another
// address.
func (c *Cluster) CountAnnouncements(ctx context.Context, name string, ip netip.Addr, d time.Duration) (map[string]int, error) {
	e, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	var conn *packet.Conn
	err = e.ns.do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen for announcements in %s: %w", name, err)
	}
	defer conn.Close()
	end := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		end = dl
	}
	if err := conn.SetReadDeadline(end); err != nil {
		return nil, err
	}
	want := ip.As4()
	out := map[string]int{}
	buf := make([]byte, 1500)
	for {
		n, _, err := conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("listen for announcements in %s: %w", name, err)
		}
		// Raw frames: the Ethernet header, then the ARP packet.
		if n < 14+28 {
			continue
		}
		a := buf[14:n]
		if [4]byte(a[14:18]) == want {
			out[net.HardwareAddr(a[8:14]).String()]++
		}
	}
}
