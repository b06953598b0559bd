// Package policy decides where IPs should live: the sticky and spread
// planners. Plan is a pure function of one node's view (live eligible nodes,
// current holders, preferred nodes); every node computes the same plan from
// the same view, so no node coordinates with another to agree on it. The
// plan is advice that lease.Decide carries out: the holder of a planned IP
// hands it off to the target in one write, and the target of an unheld IP
// takes it at once while the other nodes wait one rank step more.
//
// Policies (ConfigMap key policy):
//
//   - sticky (default): a live holder keeps its IPs. An unheld IP (new, or
//     its holder died) gets no plan: rendezvous rank decides, so a dead
//     node's IPs are spread over the survivors, each going to the survivor
//     ranked best for it. A returning node takes nothing back.
//   - spread: every live node ends with ⌊n/k⌋ or ⌈n/k⌉ of the n IPs. Unheld
//     IPs fill the nodes below their share first, so a dead node's IPs land
//     on the survivors in balance and nothing else moves; then only
//     overloaded holders hand their excess to the nodes still below their
//     share. The number of handoffs is the minimum that restores balance.
//
// Preferred nodes (a Service annotation, or the ConfigMap default list) act
// under both policies: an IP lives on the first of its preferred nodes that
// is live and eligible, and returns there when that node comes back, which
// is the one time sticky moves a held IP. When none of them is live the IP
// falls back to the policy: sticky keeps it on its live holder (or lets rank
// choose), spread treats it like any other IP. Under spread a pinned IP
// counts as its node's load, and the other IPs balance around it. A
// ConfigMap default list of one node, say node-a, keeps every IP on node-a
// while it is alive (the ancestor project's first-alive mode); listing
// several keeps them on the first alive of those, in order.
//
// What moves when, with 3 nodes a, b, c holding 12 IPs 4/4/4:
//
//	event                     sticky                          spread
//	c dies                    c's 4 go to a and b by rank     c's 4 go 2 to a, 2 to b: 6/6
//	                          (each to its best survivor)     (no held IP moves)
//	c returns                 nothing moves: 6/6/0            2 from a, 2 from b to c: 4/4/4
//	d joins                   nothing moves                   1 from each to d: 3/3/3/3
//	an IP prefers c           it moves to c, and back to c    the same; the other IPs
//	                          whenever c returns              balance around it
//	all its preferred nodes   it stays on its live holder     it is balanced like any other
//	are dead
package policy
