// Package config turns the data of the eip-config ConfigMap into a validated,
// typed Config. It is the only place where configuration text is read; the
// rest of eip sees durations, prefix lengths and address ranges.
//
// Guarantees: Parse either returns a Config that satisfies every rule below
// or an error naming each offending key (errors.Join of all of them) with
// the value, what is wrong and what is accepted. It never half-applies: the
// caller keeps its last good Config when Parse fails. Unknown keys are not
// errors; they are reported in Config.Warnings, with a suggestion when the
// key looks like a misspelt known one.
//
// # Keys
//
// Every value may carry surrounding whitespace; an empty value means the
// default.
//
//	iface           interface name (at most 15 bytes, no '/', ':' or
//	                whitespace) or "auto": the interface whose connected
//	                subnet contains the IP. Default "auto".
//	netmask         prefix length used when binding IPv4 addresses, as a
//	                length ("24", "/24") or a dotted mask ("255.255.255.0");
//	                8 to 32. Default 32: a host address, on eipd's own
//	                device. A shorter one is the interface's connected
//	                subnet, so the address is bound on the interface.
//	netmask6        prefix length used when binding IPv6 addresses; 1 to 128.
//	                Default 128.
//	policy          "sticky" (default) or "spread".
//	node-selector   label selector of eligible nodes, kubectl syntax
//	                ("zone=a,!no-eip"). Default: every node.
//	lease-duration  Go duration ("2s", "1500ms") or plain seconds ("2");
//	                1s to 1h. Default 2s.
//	renew-interval  same syntax; at least 100ms and at most half of
//	                lease-duration, so that one late or lost renewal never
//	                makes a live node look dead. Default 500ms.
//	api-loss        "hold" (default) or "fence".
//	fence-after     same syntax; longer than renew-interval and shorter than
//	                lease-duration. Default 3/4 of lease-duration.
//	liveness-port   UDP port, 1024 to 65535, on which eipds tell each other
//	                over the LAN that they are alive, or "off" (also "0"):
//	                liveness from heartbeat Leases alone, each renewed every
//	                renew-interval. Default 9403. No effect with
//	                api-loss=fence.
//	heartbeat-writes with liveness over the LAN, how many heartbeat writes
//	                a second all nodes together make at most: each node
//	                renews every max(10, nodes ÷ (this × renew-interval))
//	                renew intervals. 0.1 to 1000. Default 4.
//	announce-interval
//	                "off" (default, also "0"), or a duration from 10s to
//	                1h: every IP a node holds and announces on the LAN is
//	                announced again once per interval, spread over it,
//	                for routers that ignore gratuitous ARP until their
//	                entry ages out.
//	external-ips    "on" (default): eip manages the addresses of
//	                spec.externalIPs and those of LoadBalancer Services;
//	                "off": LoadBalancer Services only, and a Service's
//	                spec.externalIPs are refused (reported, never bound).
//	port-filter     "on" (default): traffic to eip's addresses reaches
//	                only the protocols and ports of the Services they serve
//	                (and ICMP); "off": every socket and NodePort of the
//	                node answers on them too.
//	load-balancer-class
//	                "any" (default): LoadBalancer Services without a
//	                spec.loadBalancerClass and those of class eip.io/eip;
//	                "only": class eip.io/eip only, so that another load
//	                balancer serves those without a class. spec.externalIPs
//	                have no class: external-ips alone decides for them.
//	preferred-nodes node names separated by commas or whitespace, in order of
//	                preference. Default none.
//	ranges          the address ranges eip may bind, one a line (below).
//	bgp-asn         this cluster's AS number for route mode, plain (64512)
//	                or asdot (1.10). Needed by bgp-peers.
//	bgp-router-id   IPv4 BGP identifier. Default: each node's own IPv4
//	                address, which keeps identifiers unique per node.
//	bgp-peers       the routers each node peers with, one a line:
//	                ADDRESS asn=N [port=179] [hold-time=90s]
//	                [password=KEY | password-secret=SECRET]
//	                [source=ADDRESS] [max-prefixes=1000]. A '#' starts
//	                a comment only at the start of a line or after a
//	                space, so a password may hold one; messages never
//	                quote a password. password-secret names a Secret in
//	                eipd's namespace whose "password" key holds the key.
//	                max-prefixes: the peer's session is closed once it
//	                sends more (eipd accepts no route from a peer).
//
// # Ranges
//
// One range a line; '#' starts a comment that runs to the end of the line;
// blank lines are ignored. A line is an address set followed by optional
// space-separated options:
//
//	198.18.100.0/24                          a CIDR, written with its host bits clear
//	198.18.100.10-198.18.100.20              an inclusive span (no spaces around '-')
//	198.18.100.7                             a single address
//	2001:db8:100::/120 name=v6 iface=eth1    options follow the address set
//
// Options:
//
//	name=NAME          a DNS label, unique across ranges; lets a Service ask for this range
//	netmask=BITS       prefix length used when binding addresses of this range;
//	                   IPv4 also accepts a dotted mask. Default: netmask or netmask6.
//	iface=NAME         interface for this range, or "auto". Default: iface.
//	auto-assign[=BOOL] LoadBalancer Services without an address may be given one
//	                   from this range. Default false.
//	namespaces=LIST    only Services of these namespaces (comma separated, no
//	                   spaces) may use the range's addresses, by any means;
//	                   others are refused. Default: every namespace.
//	announce=MODE      arp (default): answered and announced on the LAN
//	                   interface by gratuitous ARP/NA; bgp: a host route
//	                   announced to bgp-peers, the address on eipd's device
//	                   (no iface or netmask then); both.
//	communities=LIST   standard communities ASN:VALUE, comma separated, on
//	                   the range's routes (bgp and both only).
//	local-pref=N       LOCAL_PREF of the range's routes, for iBGP peers.
//
// Ranges must not overlap, must not use IPv4-mapped IPv6 forms (write
// 198.18.0.1, not ::ffff:198.18.0.1) or zones, and must not include
// addresses that no host may answer for: 0.0.0.0/8, loopback, link-local,
// multicast, 255.255.255.255, ::, ::1, ::ffff:0:0/96, fe80::/10, ff00::/8.
// This is what keeps a catch-all such as 0.0.0.0/0 out: the ranges are the
// security boundary between who may create a Service and what a node will
// answer for. The network and broadcast addresses of an IPv4 range written
// as a CIDR shorter than /31 are part of the range but never used (see
// Range.Unusable).
//
// Parse returns the ranges sorted by address (IPv4 first), which Lookup
// relies on; build a Config through Parse rather than by hand.
package config
