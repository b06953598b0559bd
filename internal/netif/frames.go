package netif

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
)

const (
	ipv6HeaderLen = 40
	protoICMPv6   = 58
	// ndpHopLimit is the only hop limit a receiver accepts on neighbour
	// discovery messages (RFC 4861 7.1): proof that they were not routed.
	ndpHopLimit = 255
	// claimSnapLen is enough for any ARP packet and for an NS or NA with
	// its options.
	claimSnapLen = 256
)

// allNodesMAC is the Ethernet group of ff02::1.
func allNodesMAC() net.HardwareAddr {
	return net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
}

// announcementFrames returns the Ethernet frames that tell a LAN ip is at
// mac: a gratuitous ARP request and reply for IPv4 (hosts differ in which
// one they honour), an unsolicited override NA to all nodes for IPv6.
func announcementFrames(mac net.HardwareAddr, ip netip.Addr) ([][]byte, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("not an Ethernet address: %q", mac)
	}
	switch {
	case ip.Is4():
		return garpFrames(mac, ip), nil
	case ip.Is6() && !ip.Is4In6() && !ip.IsMulticast() && !ip.IsUnspecified():
		f, err := naFrame(mac, ip)
		if err != nil {
			return nil, err
		}
		return [][]byte{f}, nil
	}
	return nil, fmt.Errorf("cannot announce %s", ip)
}

// garpFrames builds a broadcast ARP request (target hardware address zero,
// RFC 5227 2.3) and reply (target hardware address = sender, which Linux
// requires to treat a reply as gratuitous), both with sender = target = ip.
func garpFrames(mac net.HardwareAddr, ip netip.Addr) [][]byte {
	b := make([]byte, 0, 2*minFrameLen)
	b = appendARPFrame(b, arp.OperationRequest, mac, ip, make(net.HardwareAddr, 6), ip)
	b = appendARPFrame(b, arp.OperationReply, mac, ip, mac, ip)
	return [][]byte{b[:minFrameLen:minFrameLen], b[minFrameLen:]}
}

// minFrameLen is the shortest Ethernet frame without its checksum, which
// an ARP frame is padded to.
const minFrameLen = 60

// appendARPFrame appends to b a broadcast Ethernet frame from mac with an
// ARP packet for IPv4 over Ethernet, padded to minFrameLen: what
// ethernet.Frame and arp.Packet marshal, without the half-dozen
// allocations of theirs that a mass failover made for each of some
// 30,000 probes and announcements.
func appendARPFrame(b []byte, op arp.Operation, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	start := len(b)
	b = append(b, ethernet.Broadcast...)
	b = append(b, sha...)
	b = binary.BigEndian.AppendUint16(b, uint16(ethernet.EtherTypeARP))
	b = binary.BigEndian.AppendUint16(b, 1) // hardware type: Ethernet
	b = binary.BigEndian.AppendUint16(b, uint16(ethernet.EtherTypeIPv4))
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, uint16(op))
	b = append(b, sha...)
	b = append(b, spa.AsSlice()...)
	b = append(b, tha...)
	b = append(b, tpa.AsSlice()...)
	for len(b)-start < minFrameLen {
		b = append(b, 0)
	}
	return b
}

// naFrame builds an unsolicited neighbour advertisement to ff02::1 with the
// override flag and a target link-layer address option. Its source is ip
// itself, an address assigned to the interface (RFC 4861 7.2.4), so no
// link-local address is needed.
func naFrame(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	dst := netip.IPv6LinkLocalAllNodes()
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
	icmp, err := ndp.MarshalMessageChecksum(na, ip, dst)
	if err != nil {
		return nil, fmt.Errorf("marshal NA: %w", err)
	}
	return wrapNDP(mac, allNodesMAC(), ip, dst, icmp)
}

// wrapNDP wraps an ICMPv6 neighbour discovery message in IPv6 and
// Ethernet headers.
func wrapNDP(mac, ethDst net.HardwareAddr, src, dst netip.Addr, icmp []byte) ([]byte, error) {
	pkt := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(icmp))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:6], uint16(len(icmp)))
	pkt[6] = protoICMPv6
	pkt[7] = ndpHopLimit
	src16, dst16 := src.As16(), dst.As16()
	copy(pkt[8:24], src16[:])
	copy(pkt[24:40], dst16[:])
	pkt = append(pkt, icmp...)
	f := &ethernet.Frame{Destination: ethDst, Source: mac, EtherType: ethernet.EtherTypeIPv6, Payload: pkt}
	fb, err := f.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("marshal NDP frame: %w", err)
	}
	return fb, nil
}

// probeFrame asks the LAN whether anyone holds ip, without claiming it:
// an ARP probe for IPv4 (RFC 5227 2.1.1: sender IP 0.0.0.0, broadcast),
// a duplicate address detection NS for IPv6 (RFC 4862 5.4.2: from ::, to
// ip's solicited-node group, no link-layer option). A holder answers with
// an ARP reply or an NA to all nodes, which WatchClaims reports.
func probeFrame(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	if ip.Is4() {
		return requestFrame(mac, netip.IPv4Unspecified(), ip)
	}
	return requestFrame(mac, netip.IPv6Unspecified(), ip)
}

// askFrame is a request for ip from src, an address of the sender's own:
// a broadcast ARP request, or a neighbour solicitation to ip's
// solicited-node group with mac as its source link-layer option (RFC 4861
// 7.2.2). ip's holder answers it, unicast to mac.
func askFrame(mac net.HardwareAddr, src, ip netip.Addr) ([]byte, error) {
	if src.IsUnspecified() {
		return nil, fmt.Errorf("cannot ask for %s from %s", ip, src)
	}
	return requestFrame(mac, src, ip)
}

// requestFrame is an ARP request or neighbour solicitation for ip from src
// at mac; from the unspecified address it is a probe.
func requestFrame(mac net.HardwareAddr, src, ip netip.Addr) ([]byte, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("not an Ethernet address: %q", mac)
	}
	if ip.Is4() && src.Is4() {
		return appendARPFrame(make([]byte, 0, minFrameLen), arp.OperationRequest, mac, src, make(net.HardwareAddr, 6), ip), nil
	}
	if !ip.Is6() || ip.Is4In6() || ip.IsMulticast() || ip.IsUnspecified() || !src.Is6() || src.Is4In6() {
		return nil, fmt.Errorf("cannot ask for %s from %s", ip, src)
	}
	group, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return nil, fmt.Errorf("ask for %s: %w", ip, err)
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: ip}
	if !src.IsUnspecified() {
		ns.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: mac}}
	}
	icmp, err := ndp.MarshalMessageChecksum(ns, src, group)
	if err != nil {
		return nil, fmt.Errorf("marshal NS: %w", err)
	}
	g := group.As16()
	return wrapNDP(mac, net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}, src, group, icmp)
}

// parseClaim reads an Ethernet frame and returns the address its sender
// says it holds, and the sender's MAC, unless the sender is own:
//   - ARP request or reply: sender IP at sender MAC;
//   - NA, solicited or not: target at the target link-layer option, or at
//     the frame's source without one;
//   - NS from an assigned address: that source at the source link-layer
//     option, or at the frame's source.
//
// A probe (an RFC 5227 ARP probe from 0.0.0.0, a DAD neighbour
// solicitation from ::) claims nothing yet but asks about its target: it
// returns the target, the sender's MAC, and probe true.
//
// The MAC it returns may share frame's memory. An untagged ARP frame, most
// of what the watch reads, is read in place: a mass failover's probes and
// announcements reached every node, and a copy of each was garbage.
func parseClaim(frame []byte, own net.HardwareAddr) (ip netip.Addr, mac net.HardwareAddr, probe, ok bool) {
	if len(frame) >= 14 && binary.BigEndian.Uint16(frame[12:14]) == uint16(ethernet.EtherTypeARP) {
		if bytes.Equal(frame[6:12], own) {
			return netip.Addr{}, nil, false, false
		}
		ip, mac, probe = parseARPClaim(frame[14:])
	} else {
		var f ethernet.Frame
		if err := f.UnmarshalBinary(frame); err != nil || bytes.Equal(f.Source, own) {
			return netip.Addr{}, nil, false, false
		}
		switch f.EtherType {
		case ethernet.EtherTypeARP:
			ip, mac, probe = parseARPClaim(f.Payload)
		case ethernet.EtherTypeIPv6:
			ip, mac, probe = parseNDPClaim(f.Payload)
			if ip.IsValid() && mac == nil {
				mac = f.Source
			}
		}
	}
	if !ip.IsValid() || ip.IsUnspecified() || len(mac) != 6 || bytes.Equal(mac, own) {
		return netip.Addr{}, nil, false, false
	}
	return ip, mac, probe, true
}

// parseARPClaim reads an ARP packet for IPv4 over Ethernet in place.
func parseARPClaim(b []byte) (netip.Addr, net.HardwareAddr, bool) {
	if len(b) < 28 || binary.BigEndian.Uint16(b[0:2]) != 1 || binary.BigEndian.Uint16(b[2:4]) != uint16(ethernet.EtherTypeIPv4) ||
		b[4] != 6 || b[5] != 4 {
		return netip.Addr{}, nil, false
	}
	op := arp.Operation(binary.BigEndian.Uint16(b[6:8]))
	sha, spa, tpa := net.HardwareAddr(b[8:14:14]), netip.AddrFrom4([4]byte(b[14:18])), netip.AddrFrom4([4]byte(b[24:28]))
	if spa.IsUnspecified() && op == arp.OperationRequest {
		return tpa, sha, true
	}
	return spa, sha, false
}

// parseNDPClaim returns the claimed address and, if an option names it, the
// link-layer address; a nil MAC means "the frame's source".
func parseNDPClaim(b []byte) (netip.Addr, net.HardwareAddr, bool) {
	if len(b) < ipv6HeaderLen || b[0]>>4 != 6 || b[6] != protoICMPv6 || b[7] != ndpHopLimit {
		return netip.Addr{}, nil, false
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	if len(b) < ipv6HeaderLen+plen {
		return netip.Addr{}, nil, false
	}
	src := netip.AddrFrom16([16]byte(b[8:24]))
	m, err := ndp.ParseMessage(b[ipv6HeaderLen : ipv6HeaderLen+plen])
	if err != nil {
		return netip.Addr{}, nil, false
	}
	switch m := m.(type) {
	case *ndp.NeighborAdvertisement:
		return m.TargetAddress, linkLayerOption(m.Options, ndp.Target), false
	case *ndp.NeighborSolicitation:
		if src.IsUnspecified() {
			return m.TargetAddress, nil, true
		}
		return src, linkLayerOption(m.Options, ndp.Source), false
	}
	return netip.Addr{}, nil, false
}

func linkLayerOption(opts []ndp.Option, dir ndp.Direction) net.HardwareAddr {
	for _, o := range opts {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == dir {
			return lla.Addr
		}
	}
	return nil
}

// claimFilter passes ARP frames and ICMPv6 neighbour solicitations and
// advertisements without extension headers, truncated to claimSnapLen,
// unless their Ethernet source is own: the socket sees the frames its
// interface sends too, and at a cold start this node's own probes and
// announcements were a third of what it read on three nodes, each a
// wake-up and a read for a frame parseClaim drops.
func claimFilter(own net.HardwareAddr) ([]bpf.RawInstruction, error) {
	if len(own) != 6 {
		return nil, fmt.Errorf("not an Ethernet address: %q", own)
	}
	const (
		offSource    = 6
		offEtherType = 12
		offNextHdr   = 14 + 6
		offICMPType  = 14 + ipv6HeaderLen
		typeNS       = 135
		typeNA       = 136
	)
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: offSource, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: binary.BigEndian.Uint32(own[:4]), SkipFalse: 2},
		bpf.LoadAbsolute{Off: offSource + 4, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(binary.BigEndian.Uint16(own[4:])), SkipTrue: 9},
		bpf.LoadAbsolute{Off: offEtherType, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ethernet.EtherTypeARP), SkipTrue: 6},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ethernet.EtherTypeIPv6), SkipFalse: 6},
		bpf.LoadAbsolute{Off: offNextHdr, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoICMPv6, SkipFalse: 4},
		bpf.LoadAbsolute{Off: offICMPType, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: typeNS, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: typeNA, SkipFalse: 1},
		bpf.RetConstant{Val: claimSnapLen},
		bpf.RetConstant{Val: 0},
	})
}
