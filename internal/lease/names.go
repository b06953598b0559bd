package lease

import (
	"net/netip"
	"strings"
)

// Labels and annotations carried by every Lease eip writes.
const (
	// ManagedByLabel marks the Leases eip owns; informers select on it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "eip"

	// RoleLabel tells heartbeats from per-IP locks without parsing names.
	RoleLabel     = "eip.io/role"
	RoleHeartbeat = "heartbeat"
	RoleLock      = "lock"

	// AnnotationIP holds the IP a lock is for, in its canonical text form.
	AnnotationIP = "eip.io/ip"
	// AnnotationServices lists the Services naming the IP, "ns/name" comma separated.
	AnnotationServices = "eip.io/services"
	// AnnotationOwner and AnnotationOwnerUID on a lock record the Service
	// that owns the IP, "namespace/name", and its UID: while that Service
	// names the IP it stays the owner, whatever the age of another Service
	// naming it (package ipset, Incumbents).
	AnnotationOwner    = "eip.io/owner"
	AnnotationOwnerUID = "eip.io/owner-uid"
	// AnnotationMoveTo asks the holder to hand the IP to the named node.
	AnnotationMoveTo = "eip.io/move-to"
	// AnnotationSuccessor names the node that holds the IP after its
	// holder is judged dead, before any write (docs/design.md, Succession).
	AnnotationSuccessor = "eip.io/successor"
	// AnnotationReservedFor on a lock marks it as a reservation made for
	// the Service "namespace/name" before that Service's status names the
	// address (package alloc).
	AnnotationReservedFor = "eip.io/reserved-for"

	// AnnotationEligible on a heartbeat says whether the node can serve IPs
	// ("true"/"false"); AnnotationError says why not, or which configuration
	// error that node reports.
	AnnotationEligible = "eip.io/eligible"
	AnnotationError    = "eip.io/error"
	// AnnotationHeld on a heartbeat is the number of IPs the node has bound.
	AnnotationHeld = "eip.io/held"
	// AnnotationBGP on a heartbeat lists the node's BGP sessions (route
	// mode), see FormatBGPSessions.
	AnnotationBGP = "eip.io/bgp"
	// AnnotationMACs on a heartbeat lists the link-layer addresses of the
	// node's interfaces, so that nodes tell each other's answers on the
	// LAN from strangers'; see FormatMACs.
	AnnotationMACs = "eip.io/macs"
	// AnnotationConflicts on a heartbeat lists the IPs the node holds but
	// does not bind because a machine that is not an eip node answers for
	// them, and AnnotationClaims the IPs it binds that such a machine
	// claims too; see FormatAnswers.
	AnnotationConflicts = "eip.io/conflicts"
	AnnotationClaims    = "eip.io/claims"
	// AnnotationWire on a heartbeat is the node's report of the wire
	// (wire.Report): the IPs it checks for their holders that are not
	// answered by their holder alone. AnnotationWireChecked is the time
	// (RFC 3339) since which it checked every IP it checks; it is written
	// with renewals due anyway, never alone.
	AnnotationWire        = "eip.io/wire"
	AnnotationWireChecked = "eip.io/wire-checked"
	// AnnotationCheckRequest on a heartbeat is a token `kubectl eip check`
	// writes to ask the node for a fresh check of every IP it checks;
	// AnnotationCheckDone is the node's answer: the token of the last
	// request after which it checked them all.
	AnnotationCheckRequest = "eip.io/check-request"
	AnnotationCheckDone    = "eip.io/check-done"
	// AnnotationLivenessPort on a heartbeat is the UDP port on which the
	// node sends and hears liveness over the LAN; absent when it does not.
	AnnotationLivenessPort = "eip.io/liveness-port"
	// AnnotationLivenessFormat on a heartbeat names the format of the
	// node's liveness datagrams, LivenessFormat, and the renewal that
	// wrote it ("2@" and the renewTime in microseconds since the epoch):
	// an eipd from before the format keeps annotations it does not know
	// when it renews, so after a rollback to it the annotation would stay
	// and name a format its node no longer speaks; bound to a renewal, it
	// counts only while the renewal that wrote it is the latest.
	AnnotationLivenessFormat = "eip.io/liveness-format"
	// AnnotationBuild on a heartbeat is the build of the node's eipd, as
	// `eipd --version` prints it, for `kubectl eip version`. Every release
	// writes it, so it never outlives the eipd that wrote it.
	AnnotationBuild = "eip.io/build"
	// LivenessFormat is the format of liveness datagrams this eipd speaks
	// (lanlive): its peers take no datagram of the format before from it.
	LivenessFormat = "2"
)

// heartbeatPrefix starts every heartbeat Lease name. No IP text starts with
// "node", so heartbeat and lock names never collide.
const heartbeatPrefix = "eip-node-"

// NameFor is the name of the lock Lease of ip: "eip-" and the IP with '.'
// and ':' replaced by '-', e.g. eip-10-0-0-5 and eip-2001-db8--5. An IPv6
// address ending in "::" is written with a final 0 (2001:db8:1::0, the same
// address), because a Lease name must end with a letter or digit.
//
// The agent names every IP several times per pass, so this allocates once.
func NameFor(ip netip.Addr) string {
	var b [maxNameLen]byte
	return string(appendName(b[:0], ip))
}

// IsNameFor says whether name is NameFor(ip), without allocating: a full
// pass checks the name of every lock it reads.
func IsNameFor(name string, ip netip.Addr) bool {
	var b [maxNameLen]byte
	return string(appendName(b[:0], ip)) == name
}

// maxNameLen is the longest NameFor: "eip-", an IPv6 address, a final 0.
const maxNameLen = len("eip-") + len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") + 1

func appendName(b []byte, ip netip.Addr) []byte {
	b = append(b, "eip-"...)
	start := len(b)
	b = ip.Unmap().AppendTo(b)
	for i := start; i < len(b); i++ {
		if b[i] == '.' || b[i] == ':' {
			b[i] = '-'
		}
	}
	if b[len(b)-1] == '-' {
		b = append(b, '0')
	}
	return b
}

// HeartbeatName is the name of the heartbeat Lease of node.
func HeartbeatName(node string) string {
	return heartbeatPrefix + node
}

// NodeOf returns the node a heartbeat Lease name belongs to.
func NodeOf(heartbeatName string) (string, bool) {
	node, ok := strings.CutPrefix(heartbeatName, heartbeatPrefix)
	return node, ok && node != ""
}
