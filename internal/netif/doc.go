// Package netif is the only part of eip that touches the operating system's
// network stack: it makes the device whose addresses die with the daemon
// ([Tun]), binds and unbinds addresses with netlink (on that device, or on
// a LAN interface with a kernel lifetime), streams address and link events,
// announces bound addresses with gratuitous ARP and unsolicited neighbour
// advertisements, and watches the wire for other machines announcing them.
//
// Guarantees and limits:
//   - Every adapter acts in the network namespace it was created in
//     ([NewAddresses], [NewAnnouncer]; [Watch] and [WatchClaims] in the one
//     they were called in), whichever goroutine later uses it.
//   - Announcements are sent as raw Ethernet frames, so they need neither
//     another IPv4 address nor an IPv6 link-local address on the interface.
//     Interfaces without an Ethernet link layer cannot be announced on.
//   - Removing an IPv4 address never takes other addresses with it: when the
//     address is the primary of a subnet that has secondaries, the
//     interface's promote_secondaries switch is turned on first.
//
// Nothing here knows about Kubernetes.
package netif
