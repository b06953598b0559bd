// Package alloc chooses the addresses of type LoadBalancer Services: the
// first free address of an auto-assign range, or the one the Service asks
// for, one per IP family it wants, shared between Services only when they
// carry the same sharing key and their ports do not clash.
//
// It is pure: a Space holds what one node sees (the ranges, the nodes' own
// addresses, the addresses Services already use and the locks that exist),
// and Assign answers for one Service at a time, recording its answer so that
// the next Service of the same pass gets another address. Nodes that see the
// same Services and locks compute the same answers, which is what lets every
// node allocate without an allocator process: the answers agree, so the
// reservations (lock Leases created with Create, see package agent) rarely
// collide, and when they do, Create lets exactly one win.
//
// Rules, from docs/design.md (Which IPs) and docs/allocation.md:
//   - A Service keeps the addresses its status lists, even when their range
//     is removed (they are then not bound, and reported as out of range),
//     unless it now asks for another address or another range.
//   - spec.loadBalancerIP or AnnotationIPs requests addresses; AnnotationRange
//     chooses ranges by name, which need not be auto-assign ranges.
//     Requested addresses must lie in a range and be free.
//   - spec.ipFamilies and spec.ipFamilyPolicy decide the families:
//     SingleStack one, PreferDualStack every family that has a range,
//     RequireDualStack every family or none.
//   - Never: network and broadcast addresses of an IPv4 CIDR range,
//     addresses no host may answer for, the nodes' own addresses.
package alloc
