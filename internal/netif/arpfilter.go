package netif

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// arpFilterTable is the nftables table (family arp) of ARPFilter.
const arpFilterTable = "eip-route-mode"

// ARPFilter keeps this node from answering ARP requests for the addresses of
// route-mode ranges. Those addresses live on a [Tun], so that routed traffic is
// accepted; with the kernel's default arp_ignore=0 the node would otherwise
// answer for them on every interface, and a LAN host could reach the IP
// past the router, or take traffic from the routed path. The filter drops
// incoming ARP requests whose target lies in a range, before the kernel
// sees them; it needs CAP_NET_ADMIN only, where setting arp_ignore would
// need a writable /proc/sys and change the node for every address.
// IPv6 needs no filter: neighbour discovery answers only for addresses of
// the interface the solicitation came in on.
type ARPFilter struct{}

// Set replaces the filtered ranges (first and last address, IPv4 only;
// others are ignored) in one transaction; none removes the table.
func (ARPFilter) Set(ranges [][2]netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("arp filter: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyARP, Name: arpFilterTable}
	// Adding before deleting makes the deletion succeed whether or not
	// the table exists; the batch applies atomically.
	c.AddTable(t)
	c.DelTable(t)
	var v4 [][2]netip.Addr
	for _, r := range ranges {
		if r[0].Is4() && r[1].Is4() {
			v4 = append(v4, r)
		}
	}
	if len(v4) > 0 {
		c.AddTable(t)
		chain := c.AddChain(&nftables.Chain{
			Name: "input", Table: t, Type: nftables.ChainTypeFilter,
			// The arp family's input hook is NF_ARP_IN, 0, the same number
			// as the inet families' prerouting.
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityFilter,
		})
		for _, r := range v4 {
			c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: dropRequestsFor(r[0], r[1])})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("arp filter: %w", err)
	}
	return nil
}

// dropRequestsFor matches an Ethernet/IPv4 ARP request (RFC 826) whose
// target protocol address lies in [first, last], and drops it.
func dropRequestsFor(first, last netip.Addr) []expr.Any {
	a, b := first.As4(), last.As4()
	return []expr.Any{
		// ar_hln, ar_pln: 6-byte hardware and 4-byte protocol addresses.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 4, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{6, 4}},
		// ar_op: request.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 6, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 1}},
		// The target protocol address.
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 24, Len: 4},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: a[:], ToData: b[:]},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}
