package agent

import (
	"context"
	"net"
	"net/netip"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/eip-project/eip/internal/netif"
)

// Addresser puts addresses on interfaces (netif.Addresses).
type Addresser interface {
	// Add binds p on iface with a kernel lifetime, or refreshes it.
	Add(iface string, p netip.Prefix, lifetime time.Duration) error
	Del(iface string, p netip.Prefix) error
	List(iface string) ([]netip.Prefix, error)
	// Refresh renews the lifetimes of bound addresses, many at a time;
	// like Add it binds one that is missing.
	Refresh(addrs []netif.Bound, lifetime time.Duration) error
}

// Links answers questions about interfaces (netif.Addresses).
type Links interface {
	// IfaceFor is the interface whose connected subnet contains ip.
	IfaceFor(ip netip.Addr) (string, error)
	// Up reports whether iface exists and has carrier.
	Up(iface string) (bool, error)
	// MACs are the link-layer addresses of the node's interfaces.
	MACs() ([]net.HardwareAddr, error)
	// AnswersARP says whether the kernel answers ARP arriving on iface
	// for an IPv4 address on another device (arp_ignore is 0).
	AnswersARP(iface string) (bool, error)
}

// Devices are eipd's own address devices, which die with the process
// (netif.Tuns).
type Devices interface {
	// Name is the name of the i-th device, opened if it is not yet.
	Name(i int) (string, error)
	// Owns says whether iface is one of them.
	Owns(iface string) bool
	// Ensure creates device iface again, or sets it up again, after
	// someone deleted it or set it down; it says whether it had to.
	Ensure(iface string) (bool, error)
}

// Announcer tells the LAN where an IP lives (netif.Announcer).
type Announcer interface {
	Announce(iface string, ip netip.Addr) error
	Stop(ip netip.Addr)
	// Probe asks the LAN whether anyone holds ip; answers come as claims.
	// A holder may read it as a takeover (conflicts.go).
	Probe(iface string, ip netip.Addr) error
	// Ask asks the LAN who holds ip from an address of iface's own, which
	// no holder reads as a claim; answers come as claims.
	Ask(iface string, ip netip.Addr) error
	// Defend announces ip once, without repeats.
	Defend(iface string, ip netip.Addr) error
	// Reannounce announces each of ips once, without repeats
	// (announce-interval).
	Reannounce(iface string, ips ...netip.Addr) error
}

// LeaseWriter writes Leases (lease.Store).
type LeaseWriter interface {
	Create(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name, rv string) error
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
}

// ClaimWatcher reports other machines announcing addresses on iface
// (netif.WatchClaims), those want accepts, and keeps backlog telling
// whether it holds frames not yet reported; it blocks until ctx ends.
type ClaimWatcher func(ctx context.Context, iface string, want func(netip.Addr) bool, out chan<- netif.Claim, backlog *netif.Backlog) error
