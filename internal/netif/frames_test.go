package netif

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
	"gotest.tools/v3/assert"
)

func TestAnnouncementFramesIPv4(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.5")
	frames, err := announcementFrames(ourMAC(), ip)
	assert.NilError(t, err)
	assert.Equal(t, len(frames), 2)

	wantOps := []arp.Operation{arp.OperationRequest, arp.OperationReply}
	wantTHA := []net.HardwareAddr{make(net.HardwareAddr, 6), ourMAC()}
	for i, b := range frames {
		assert.Assert(t, len(b) >= 60, "frame %d is %d bytes, under the Ethernet minimum", i, len(b))
		var f ethernet.Frame
		assert.NilError(t, f.UnmarshalBinary(b))
		assert.DeepEqual(t, f.Destination, ethernet.Broadcast)
		assert.DeepEqual(t, f.Source, ourMAC())
		assert.Equal(t, f.EtherType, ethernet.EtherTypeARP)
		var p arp.Packet
		assert.NilError(t, p.UnmarshalBinary(f.Payload))
		assert.Equal(t, p.Operation, wantOps[i])
		assert.DeepEqual(t, p.SenderHardwareAddr, ourMAC())
		assert.Equal(t, p.SenderIP, ip)
		assert.Equal(t, p.TargetIP, ip)
		assert.DeepEqual(t, p.TargetHardwareAddr, wantTHA[i])
	}
}

func TestAnnouncementFramesIPv6(t *testing.T) {
	ip := netip.MustParseAddr("2001:db8::5")
	frames, err := announcementFrames(ourMAC(), ip)
	assert.NilError(t, err)
	assert.Equal(t, len(frames), 1)

	var f ethernet.Frame
	assert.NilError(t, f.UnmarshalBinary(frames[0]))
	assert.DeepEqual(t, f.Destination, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1})
	assert.DeepEqual(t, f.Source, ourMAC())
	assert.Equal(t, f.EtherType, ethernet.EtherTypeIPv6)

	pkt := f.Payload
	assert.Equal(t, pkt[0]>>4, uint8(6))
	assert.Equal(t, pkt[6], uint8(58), "next header ICMPv6")
	assert.Equal(t, pkt[7], uint8(255), "hop limit")
	src := netip.AddrFrom16([16]byte(pkt[8:24]))
	dst := netip.AddrFrom16([16]byte(pkt[24:40]))
	assert.Equal(t, src, ip)
	assert.Equal(t, dst, netip.MustParseAddr("ff02::1"))
	body := pkt[40 : 40+int(binary.BigEndian.Uint16(pkt[4:6]))]
	assert.Equal(t, icmpv6Checksum(src, dst, body), uint16(0), "checksum over the pseudo-header must verify")

	m, err := ndp.ParseMessage(body)
	assert.NilError(t, err)
	na, ok := m.(*ndp.NeighborAdvertisement)
	assert.Assert(t, ok, "got %T", m)
	assert.Assert(t, na.Override && !na.Solicited && !na.Router, "flags: %+v", na)
	assert.Equal(t, na.TargetAddress, ip)
	assert.DeepEqual(t, na.Options, []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ourMAC()}})
}

func TestAnnouncementFramesRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mac  net.HardwareAddr
		ip   netip.Addr
	}{
		{"no MAC", nil, netip.MustParseAddr("198.18.0.5")},
		{"InfiniBand MAC", make(net.HardwareAddr, 20), netip.MustParseAddr("198.18.0.5")},
		{"invalid address", ourMAC(), netip.Addr{}},
		{"multicast", ourMAC(), netip.MustParseAddr("ff02::1")},
		{"unspecified", ourMAC(), netip.IPv6Unspecified()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := announcementFrames(tc.mac, tc.ip)
			assert.Assert(t, err != nil)
		})
	}
}

func TestParseClaim(t *testing.T) {
	v4 := netip.MustParseAddr("198.18.0.5")
	v6 := netip.MustParseAddr("2001:db8::5")
	other6 := netip.MustParseAddr("2001:db8::9")
	theirGARP, err := announcementFrames(theirMAC(), v4)
	assert.NilError(t, err)
	ourGARP, err := announcementFrames(ourMAC(), v4)
	assert.NilError(t, err)
	theirNA, err := announcementFrames(theirMAC(), v6)
	assert.NilError(t, err)
	ourNA, err := announcementFrames(ourMAC(), v6)
	assert.NilError(t, err)
	solNode := netip.MustParseAddr("ff02::1:ff00:5")

	tests := []struct {
		name    string
		frame   []byte
		wantIP  string
		wantMAC net.HardwareAddr
	}{
		{"their gratuitous request", theirGARP[0], "198.18.0.5", theirMAC()},
		{"their gratuitous reply", theirGARP[1], "198.18.0.5", theirMAC()},
		{"our gratuitous request", ourGARP[0], "", nil},
		{"our gratuitous reply", ourGARP[1], "", nil},
		{
			"their ordinary request names its sender",
			arpFrame(t, theirMAC(), arp.OperationRequest, theirMAC(), "198.18.0.9", "198.18.0.1"),
			"198.18.0.9", theirMAC(),
		},
		{
			"sent from our MAC on behalf of another",
			arpFrame(t, ourMAC(), arp.OperationReply, theirMAC(), "198.18.0.5", "198.18.0.5"),
			"", nil,
		},
		{
			"ARP inside a VLAN tag",
			vlanTagged(t, arpFrame(t, theirMAC(), arp.OperationReply, theirMAC(), "198.18.0.5", "198.18.0.5")),
			"198.18.0.5", theirMAC(),
		},
		{"their unsolicited NA", theirNA[0], "2001:db8::5", theirMAC()},
		{"our unsolicited NA", ourNA[0], "", nil},
		{
			"solicited NA to us",
			ndpFrame(t, theirMAC(), ourMAC(), v6, other6, 255, &ndp.NeighborAdvertisement{
				Solicited: true, TargetAddress: v6,
				Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: theirMAC()}},
			}),
			"2001:db8::5", theirMAC(),
		},
		{
			"NA without link-layer option is at the frame's source",
			ndpFrame(t, theirMAC(), allNodesMAC(), v6, netip.IPv6LinkLocalAllNodes(), 255,
				&ndp.NeighborAdvertisement{Override: true, TargetAddress: v6}),
			"2001:db8::5", theirMAC(),
		},
		{
			"NA naming our MAC",
			ndpFrame(t, theirMAC(), allNodesMAC(), v6, netip.IPv6LinkLocalAllNodes(), 255, &ndp.NeighborAdvertisement{
				TargetAddress: v6,
				Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ourMAC()}},
			}),
			"", nil,
		},
		{
			"routed NA (hop limit below 255)",
			ndpFrame(t, theirMAC(), allNodesMAC(), v6, netip.IPv6LinkLocalAllNodes(), 64, &ndp.NeighborAdvertisement{
				TargetAddress: v6,
				Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: theirMAC()}},
			}),
			"", nil,
		},
		{
			"NS from an assigned address names its source",
			ndpFrame(t, theirMAC(), net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 5}, other6, solNode, 255, &ndp.NeighborSolicitation{
				TargetAddress: v6,
				Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: theirMAC()}},
			}),
			"2001:db8::9", theirMAC(),
		},
		{"truncated", theirGARP[0][:20], "", nil},
		{"too short for Ethernet", []byte{1, 2, 3}, "", nil},
		{"IPv4 packet", ethFrame(t, theirMAC(), ourMAC(), ethernet.EtherTypeIPv4, make([]byte, 40)), "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ip, mac, probe, ok := parseClaim(tc.frame, ourMAC())
			if tc.wantIP == "" {
				assert.Assert(t, !ok, "unexpected claim %s at %s", ip, mac)
				return
			}
			assert.Assert(t, ok && !probe)
			assert.Equal(t, ip, netip.MustParseAddr(tc.wantIP))
			assert.DeepEqual(t, mac, tc.wantMAC)
		})
	}
}

// A probe asks about its target: the ARP probe of RFC 5227 (from 0.0.0.0)
// and the DAD neighbour solicitation (from ::) name the target and the
// sender's MAC.
func TestParseClaimOfProbes(t *testing.T) {
	v6 := netip.MustParseAddr("2001:db8::5")
	solNode := netip.MustParseAddr("ff02::1:ff00:5")
	for name, frame := range map[string][]byte{
		"198.18.0.5": arpFrame(t, theirMAC(), arp.OperationRequest, theirMAC(), "0.0.0.0", "198.18.0.5"),
		"2001:db8::5": ndpFrame(t, theirMAC(), net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 5}, netip.IPv6Unspecified(), solNode, 255,
			&ndp.NeighborSolicitation{TargetAddress: v6}),
	} {
		ip, mac, probe, ok := parseClaim(frame, ourMAC())
		assert.Assert(t, ok && probe, name)
		assert.Equal(t, ip, netip.MustParseAddr(name))
		assert.DeepEqual(t, mac, theirMAC())
		_, _, _, ok = parseClaim(frame, theirMAC())
		assert.Assert(t, !ok, "our own probe of %s", name)
	}
}

func TestClaimFilter(t *testing.T) {
	filter, err := claimFilter(ourMAC())
	assert.NilError(t, err)
	instrs, ok := bpf.Disassemble(filter)
	assert.Assert(t, ok)
	vm, err := bpf.NewVM(instrs)
	assert.NilError(t, err)

	v4 := netip.MustParseAddr("198.18.0.5")
	v6 := netip.MustParseAddr("2001:db8::5")
	garp, err := announcementFrames(theirMAC(), v4)
	assert.NilError(t, err)
	na, err := announcementFrames(theirMAC(), v6)
	assert.NilError(t, err)
	ns := ndpFrame(t, theirMAC(), allNodesMAC(), v6, netip.IPv6LinkLocalAllNodes(), 255, &ndp.NeighborSolicitation{TargetAddress: v6})
	rs := ndpFrame(t, theirMAC(), allNodesMAC(), v6, netip.IPv6LinkLocalAllNodes(), 255, &ndp.RouterSolicitation{})
	udp6 := append([]byte(nil), na[0]...)
	udp6[14+6] = 17
	ourGARP, err := announcementFrames(ourMAC(), v4)
	assert.NilError(t, err)
	ourNA, err := announcementFrames(ourMAC(), v6)
	assert.NilError(t, err)
	sameFirst4, sameLast2 := append([]byte(nil), ourGARP[0]...), append([]byte(nil), ourGARP[0]...)
	sameFirst4[6+5]++
	sameLast2[6]++

	for _, tc := range []struct {
		name  string
		frame []byte
		pass  bool
	}{
		{"ARP", garp[0], true},
		{"NA", na[0], true},
		{"NS", ns, true},
		{"router solicitation", rs, false},
		{"UDP over IPv6", udp6, false},
		{"IPv4", ethFrame(t, theirMAC(), ourMAC(), ethernet.EtherTypeIPv4, make([]byte, 60)), false},
		{"our own ARP", ourGARP[0], false},
		{"our own NA", ourNA[0], false},
		{"ARP from a MAC that shares our first four bytes", sameFirst4, true},
		{"ARP from a MAC that shares our last two bytes", sameLast2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := vm.Run(tc.frame)
			assert.NilError(t, err)
			assert.Equal(t, n > 0, tc.pass, "filter returned %d", n)
		})
	}
}

func ethFrame(t *testing.T, src, dst net.HardwareAddr, et ethernet.EtherType, payload []byte) []byte {
	t.Helper()
	b, err := (&ethernet.Frame{Destination: dst, Source: src, EtherType: et, Payload: payload}).MarshalBinary()
	assert.NilError(t, err)
	return b
}

func arpFrame(t *testing.T, ethSrc net.HardwareAddr, op arp.Operation, sha net.HardwareAddr, spa, tpa string) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, sha, netip.MustParseAddr(spa), ethernet.Broadcast, netip.MustParseAddr(tpa))
	assert.NilError(t, err)
	pb, err := p.MarshalBinary()
	assert.NilError(t, err)
	return ethFrame(t, ethSrc, ethernet.Broadcast, ethernet.EtherTypeARP, pb)
}

func vlanTagged(t *testing.T, frame []byte) []byte {
	t.Helper()
	var f ethernet.Frame
	assert.NilError(t, f.UnmarshalBinary(frame))
	f.VLAN = &ethernet.VLAN{ID: 42}
	b, err := f.MarshalBinary()
	assert.NilError(t, err)
	return b
}

func ndpFrame(t *testing.T, ethSrc, ethDst net.HardwareAddr, src, dst netip.Addr, hop uint8, m ndp.Message) []byte {
	t.Helper()
	body, err := ndp.MarshalMessageChecksum(m, src, dst)
	assert.NilError(t, err)
	pkt := make([]byte, 40, 40+len(body))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:6], uint16(len(body)))
	pkt[6] = 58
	pkt[7] = hop
	s, d := src.As16(), dst.As16()
	copy(pkt[8:24], s[:])
	copy(pkt[24:40], d[:])
	return ethFrame(t, ethSrc, ethDst, ethernet.EtherTypeIPv6, append(pkt, body...))
}

// icmpv6Checksum is the RFC 4443 checksum; over a correct message, with its
// checksum field in place, it is 0.
func icmpv6Checksum(src, dst netip.Addr, body []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var l [8]byte
	binary.BigEndian.PutUint32(l[:4], uint32(len(body)))
	l[7] = 58
	add(l[:])
	add(body)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// The ARP frames eipd builds by hand are byte for byte what
// mdlayher/ethernet and mdlayher/arp marshal.
func TestARPFramesAsTheLibraryMarshals(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.5")
	zero := make(net.HardwareAddr, 6)
	for _, tc := range []struct {
		op  arp.Operation
		spa netip.Addr
		tha net.HardwareAddr
		tpa netip.Addr
	}{
		{arp.OperationRequest, ip, zero, ip},                      // announcement
		{arp.OperationReply, ip, ourMAC(), ip},                    // announcement
		{arp.OperationRequest, netip.IPv4Unspecified(), zero, ip}, // probe
	} {
		p, err := arp.NewPacket(tc.op, ourMAC(), tc.spa, tc.tha, tc.tpa)
		assert.NilError(t, err)
		pb, err := p.MarshalBinary()
		assert.NilError(t, err)
		want, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: ourMAC(), EtherType: ethernet.EtherTypeARP, Payload: pb}).MarshalBinary()
		assert.NilError(t, err)
		assert.DeepEqual(t, appendARPFrame([]byte{0xee}, tc.op, ourMAC(), tc.spa, tc.tha, tc.tpa)[1:], want)
	}
}

// A question names the asker's own address and MAC, as an ordinary ARP
// request or NS does, and is no probe of its target; from the unspecified
// address it would be one, and is refused.
func TestAskFrameIsNoProbe(t *testing.T) {
	for _, tc := range []struct{ src, ip string }{{"198.18.0.9", "198.18.0.5"}, {"fe80::9", "2001:db8::5"}} {
		src, ip := netip.MustParseAddr(tc.src), netip.MustParseAddr(tc.ip)
		f, err := askFrame(theirMAC(), src, ip)
		assert.NilError(t, err)
		got, mac, probe, ok := parseClaim(f, ourMAC())
		assert.Assert(t, ok && !probe, tc.ip)
		assert.Equal(t, got, src)
		assert.DeepEqual(t, mac, theirMAC())
		p, err := probeFrame(theirMAC(), ip)
		assert.NilError(t, err)
		got, _, probe, _ = parseClaim(p, ourMAC())
		assert.Assert(t, probe && got == ip, tc.ip)
		_, err = askFrame(theirMAC(), netip.IPv6Unspecified(), ip)
		assert.ErrorContains(t, err, "cannot ask")
	}
}
