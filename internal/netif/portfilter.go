package netif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// portFilterTable is the nftables table (family inet) of PortFilter.
const portFilterTable = "eip-ports"

// Served is one protocol and port that traffic to an external IP may reach:
// a port of a Service the IP serves.
type Served struct {
	Addr netip.Addr
	// Proto is the IP protocol number (unix.IPPROTO_TCP, _UDP, _SCTP).
	Proto uint8
	Port  uint16
}

// PortFilter keeps traffic to eip's addresses to the ports of their
// Services. eip binds its addresses as host addresses, so without it every
// socket of the node bound to all addresses (the kubelet's :10250, sshd,
// an exporter) and, with kube-proxy's nodePortAddresses unset, every
// NodePort of every namespace answers on every external IP.
//
// One table, family inet, holds two sets, the managed addresses and the
// (address, protocol, port) triples their Services expose, each family
// apart, and a fixed handful of rules, so that its size in rules does not
// grow with the IPs:
//
//   - prerouting, before kube-proxy's DNAT (priority -150, dstnat being
//     -100): a triple of the set is accepted; ICMP and ICMPv6 to a managed
//     address are accepted (ping, path MTU, and the neighbour
//     solicitations NDP sends to the address itself; ARP is not IP and
//     passes anyway); anything else to a managed address is dropped.
//   - input, after IPVS (which takes its traffic at priority 98) and
//     after kube-proxy's DNAT, so only what is still addressed to a
//     managed address, bound for a socket of the node: ICMP is accepted,
//     the rest dropped, a Service's own port included when kube-proxy did
//     not translate it (no endpoints, or no kube-proxy).
//
// The first Set, and the next after a failure, replaces the whole table
// in one transaction; the others add and delete only the set elements that
// changed, in one transaction too, so the kernel never shows a
// half-written filter. Remove deletes the table. It needs CAP_NET_ADMIN
// only. Its methods are for one goroutine.
type PortFilter struct {
	// installed: the table holds exactly addrs and served.
	installed bool
	addrs     map[netip.Addr]bool
	served    map[Served]bool
}

// NewPortFilter returns a filter that has installed nothing yet.
func NewPortFilter() *PortFilter { return &PortFilter{} }

// Set makes the table filter traffic to addrs down to served (whose
// addresses should be among addrs); an empty addrs filters nothing.
func (p *PortFilter) Set(addrs []netip.Addr, served []Served) error {
	wantAddrs := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		wantAddrs[a.Unmap()] = true
	}
	wantServed := make(map[Served]bool, len(served))
	for _, s := range served {
		s.Addr = s.Addr.Unmap()
		wantServed[s] = true
	}
	var err error
	if p.installed {
		err = p.update(wantAddrs, wantServed)
	} else {
		err = replace(wantAddrs, wantServed)
	}
	p.installed = err == nil
	if err != nil {
		return fmt.Errorf("port filter: %w", err)
	}
	p.addrs, p.served = wantAddrs, wantServed
	return nil
}

func filterTable() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: portFilterTable}
}

// replace writes the table anew, holding addrs and served.
func replace(addrs map[netip.Addr]bool, served map[Served]bool) error {
	c, err := nftables.New(nftables.WithSockOptions(sendBuffer(len(addrs) + len(served))))
	if err != nil {
		return err
	}
	t := filterTable()
	// Adding before deleting makes the deletion succeed whether or not
	// the table exists; the batch applies atomically.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityRef(110)})
	for _, f := range families() {
		if err := f.add(c, t, pre, in, addrs, served); err != nil {
			return err
		}
	}
	return c.Flush()
}

// update changes the installed sets' elements to addrs and served.
func (p *PortFilter) update(addrs map[netip.Addr]bool, served map[Served]bool) error {
	var n int
	changes := func(f ipFamily) (addA, delA, addS, delS []nftables.SetElement) {
		for a := range addrs {
			if f.is(a) && !p.addrs[a] {
				addA = append(addA, nftables.SetElement{Key: a.AsSlice()})
			}
		}
		for a := range p.addrs {
			if f.is(a) && !addrs[a] {
				delA = append(delA, nftables.SetElement{Key: a.AsSlice()})
			}
		}
		for s := range served {
			if f.is(s.Addr) && !p.served[s] {
				addS = append(addS, nftables.SetElement{Key: servedKey(s)})
			}
		}
		for s := range p.served {
			if f.is(s.Addr) && !served[s] {
				delS = append(delS, nftables.SetElement{Key: servedKey(s)})
			}
		}
		n += len(addA) + len(delA) + len(addS) + len(delS)
		return
	}
	type change struct {
		set      *nftables.Set
		add, del []nftables.SetElement
	}
	var todo []change
	t := filterTable()
	for _, f := range families() {
		addA, delA, addS, delS := changes(f)
		todo = append(todo, change{f.addrSet(t), addA, delA}, change{f.servedSet(t), addS, delS})
	}
	if n == 0 {
		return nil
	}
	c, err := nftables.New(nftables.WithSockOptions(sendBuffer(n)))
	if err != nil {
		return err
	}
	for _, ch := range todo {
		// Deleted first: an address's triples go before the address,
		// and come after it.
		for chunk := range slices.Chunk(ch.del, elementsPerMessage) {
			if err := c.SetDeleteElements(ch.set, chunk); err != nil {
				return fmt.Errorf("set %s: %w", ch.set.Name, err)
			}
		}
		for chunk := range slices.Chunk(ch.add, elementsPerMessage) {
			if err := c.SetAddElements(ch.set, chunk); err != nil {
				return fmt.Errorf("set %s: %w", ch.set.Name, err)
			}
		}
	}
	return c.Flush()
}

// Remove deletes the table, if there is one.
func (p *PortFilter) Remove() error {
	p.installed, p.addrs, p.served = false, nil, nil
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("port filter: %w", err)
	}
	t := filterTable()
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("port filter: remove: %w", err)
	}
	return nil
}

// sendBuffer sizes the socket's send buffer for a batch of about elements
// set elements, past net.core.wmem_max (SO_SNDBUFFORCE, which
// CAP_NET_ADMIN allows): the kernel takes a batch in one message, no
// larger than the buffer, and the default of 208 KiB holds about 6,000.
func sendBuffer(elements int) nftables.SockOption {
	return func(c *netlink.Conn) error {
		size := 1<<16 + elements*elementBytes
		raw, err := c.SyscallConn()
		if err != nil {
			return fmt.Errorf("send buffer: %w", err)
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			// The receive buffer too: an error's answer quotes the
			// message it answers.
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size))
		}); err != nil {
			return fmt.Errorf("send buffer: %w", err)
		}
		if serr != nil {
			return fmt.Errorf("send buffer of %d bytes: %w", size, serr)
		}
		return nil
	}
}

// elementBytes bounds what one set element takes in a batch: its
// attributes' headers and a key of up to 24 bytes.
const elementBytes = 64

// family is what differs between the IPv4 and IPv6 halves of the table.
type ipFamily struct {
	name      string // suffix of the sets' names
	nfproto   byte
	addrType  nftables.SetDatatype
	daddr     uint32 // offset of the destination in the network header
	icmpProto byte
	is        func(netip.Addr) bool
}

// families are the table's two halves.
func families() [2]ipFamily {
	return [2]ipFamily{
		{name: "4", nfproto: unix.NFPROTO_IPV4, addrType: nftables.TypeIPAddr, daddr: 16, icmpProto: unix.IPPROTO_ICMP, is: netip.Addr.Is4},
		{name: "6", nfproto: unix.NFPROTO_IPV6, addrType: nftables.TypeIP6Addr, daddr: 24, icmpProto: unix.IPPROTO_ICMPV6, is: netip.Addr.Is6},
	}
}

// add puts f's sets and rules into the batch: three rules in prerouting
// and two in input.
func (f ipFamily) add(c *nftables.Conn, t *nftables.Table, pre, in *nftables.Chain, addrs map[netip.Addr]bool, served map[Served]bool) error {
	addrSet := f.addrSet(t)
	var addrElems []nftables.SetElement
	for a := range addrs {
		if f.is(a) {
			addrElems = append(addrElems, nftables.SetElement{Key: a.AsSlice()})
		}
	}
	if err := addSet(c, addrSet, addrElems); err != nil {
		return err
	}
	servedSet := f.servedSet(t)
	var servedElems []nftables.SetElement
	for s := range served {
		if f.is(s.Addr) {
			servedElems = append(servedElems, nftables.SetElement{Key: servedKey(s)})
		}
	}
	if err := addSet(c, servedSet, servedElems); err != nil {
		return err
	}
	// Concatenations read 32-bit registers (NFT_REG32_00 on), each field
	// starting on a register of its own.
	daddrLen := uint32(f.addrType.Bytes)
	protoReg := unix.NFT_REG32_00 + daddrLen/4
	triple := append(f.match(),
		&expr.Payload{DestRegister: unix.NFT_REG32_00, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddr, Len: daddrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
		&expr.Payload{DestRegister: protoReg + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: unix.NFT_REG32_00, SetName: servedSet.Name, SetID: servedSet.ID},
		&expr.Verdict{Kind: expr.VerdictAccept})
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: triple})
	for _, chain := range []*nftables.Chain{pre, in} {
		c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: append(f.toAddr(addrSet),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.icmpProto}},
			&expr.Verdict{Kind: expr.VerdictAccept})})
		c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: append(f.toAddr(addrSet),
			&expr.Verdict{Kind: expr.VerdictDrop})})
	}
	return nil
}

// addSet adds set with elems to the batch, in messages of at most
// elementsPerMessage elements: a message's list of elements is one netlink
// attribute, whose length must fit 16 bits.
func addSet(c *nftables.Conn, set *nftables.Set, elems []nftables.SetElement) error {
	if err := c.AddSet(set, nil); err != nil {
		return fmt.Errorf("set %s: %w", set.Name, err)
	}
	for chunk := range slices.Chunk(elems, elementsPerMessage) {
		if err := c.SetAddElements(set, chunk); err != nil {
			return fmt.Errorf("set %s: %w", set.Name, err)
		}
	}
	return nil
}

// elementsPerMessage keeps a message's elements within 64 KiB: an element
// takes up to elementBytes.
const elementsPerMessage = 1<<16/elementBytes - 1

// addrSet is f's set of managed addresses; servedSet its set of (address,
// protocol, port).
func (f ipFamily) addrSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: "addrs" + f.name, KeyType: f.addrType}
}

func (f ipFamily) servedSet(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: "served" + f.name, Concatenation: true,
		KeyType: nftables.MustConcatSetType(f.addrType, nftables.TypeInetProto, nftables.TypeInetService)}
}

// match matches f's packets: the inet family carries both.
func (f ipFamily) match() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.nfproto}},
	}
}

// toAddr matches f's packets addressed to a member of set.
func (f ipFamily) toAddr(set *nftables.Set) []expr.Any {
	return append(f.match(),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: f.daddr, Len: uint32(f.addrType.Bytes)},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID})
}

// servedKey is the set key of (a, proto, port): each field padded to a
// whole 32-bit register, the port in network order.
func servedKey(s Served) []byte {
	k := append(s.Addr.AsSlice(), s.Proto, 0, 0, 0)
	return append(binary.BigEndian.AppendUint16(k, s.Port), 0, 0)
}
