// Package bgp is route mode's speaker: it runs GoBGP as a library, opens a
// session to every configured peer and announces a host route (/32 or
// /128) for each IP the agent tells it this node holds, with this node as
// next hop.
//
// The speaker is active only: it never listens, so eipd needs no
// CAP_NET_BIND_SERVICE for port 179 and the routers connect to nobody (set
// them passive, or let their attempts be refused). TCP MD5 passwords need
// no capability either.
//
// Which holder's route a router prefers is settled by MED (RFC 4271
// 9.1.2.2 c): the agent derives it from the lock's transition count
// (MEDFor), so the newest holder always has the lowest MED. A holder that
// died with its link cut keeps its session, and its routes, until the
// router's hold timer expires, but its MED is higher than its successor's,
// so the router switches as soon as the successor announces. This relies on
// the router comparing MED between the routes of different nodes: true by
// default when every node uses the same AS number (bgp-asn) towards the same
// neighbour AS, as here; routers that compare MED only per neighbour need
// "always-compare-med" (BIRD: med metric; FRR: bgp always-compare-med), and
// a router that strips or overrides MED on import defeats it.
package bgp
