package lease

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Lock is the content of a per-IP lock Lease.
type Lock struct {
	Name   string
	IP     netip.Addr
	Holder string // the node that may bind IP; empty when free
	MoveTo string // a pending move target, empty when none
	// Successor is the node that holds the IP once Holder is judged dead
	// (View.succession); empty when the lock names none.
	Successor string
	// Owner is the Service "namespace/name" the lock records as owning IP
	// (AnnotationOwner), OwnerUID its UID; empty when it records none.
	Owner    string
	OwnerUID types.UID
	Moves    int32 // ownership changes so far (leaseTransitions)
	MovedAt  time.Time
	// ResourceVersion is the version the lock was read at; writes use it as
	// their precondition.
	ResourceVersion string
}

// ParseLock reads a lock Lease. A Lease that is labelled as a lock but whose
// IP annotation is missing or garbage, or disagrees with its name, is an
// error: eip never guesses which address such a Lease protects.
func ParseLock(l *coordinationv1.Lease) (Lock, error) {
	text := l.Annotations[AnnotationIP]
	ip, err := netip.ParseAddr(text)
	if err != nil {
		return Lock{}, fmt.Errorf("lock %s: annotation %s=%q is not an IP address", l.Name, AnnotationIP, text)
	}
	if !IsNameFor(l.Name, ip) {
		return Lock{}, fmt.Errorf("lock %s: annotation %s=%q belongs to a lock named %s", l.Name, AnnotationIP, text, NameFor(ip))
	}
	lk := honoured(l)
	lk.IP, lk.Successor = ip.Unmap(), l.Annotations[AnnotationSuccessor]
	return lk, nil
}

// honoured is what a lock says even when damaged: its name, version,
// holder, move and ownership changes, the part the loop honours of a
// lock whose IP it cannot read (Kept).
func honoured(l *coordinationv1.Lease) Lock {
	lk := Lock{Name: l.Name, ResourceVersion: l.ResourceVersion, MoveTo: l.Annotations[AnnotationMoveTo],
		Owner: l.Annotations[AnnotationOwner], OwnerUID: types.UID(l.Annotations[AnnotationOwnerUID])}
	if h := l.Spec.HolderIdentity; h != nil {
		lk.Holder = *h
	}
	if t := l.Spec.LeaseTransitions; t != nil {
		lk.Moves = *t
	}
	if t := l.Spec.AcquireTime; t != nil {
		lk.MovedAt = t.Time
	}
	return lk
}

// NewLockLease builds a lock Lease for ip in namespace, naming holder, its
// successor ("" for none) and the Services, ready to Create.
func NewLockLease(namespace string, ip netip.Addr, holder, successor string, services []string, now time.Time) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      NameFor(ip),
			Namespace: namespace,
			Labels:    map[string]string{ManagedByLabel: ManagedBy, RoleLabel: RoleLock},
			Annotations: map[string]string{
				AnnotationIP: ip.Unmap().String(),
			},
		},
	}
	setServices(l, services)
	setHolder(l, holder, now)
	setSuccessor(l, successor)
	var zero int32
	l.Spec.LeaseTransitions = &zero
	return l
}

// WithHolder returns a copy of l that names holder and its successor ("" for
// none), clears any pending move, counts one more ownership change and
// records the IP and the Services (so a lock whose annotations were
// damaged by hand is repaired by its next owner). The copy keeps l's
// resourceVersion, so an Update of it fails if anyone wrote in between.
func WithHolder(l *coordinationv1.Lease, ip netip.Addr, holder, successor string, services []string, now time.Time) *coordinationv1.Lease {
	c := l.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	delete(c.Annotations, AnnotationMoveTo)
	c.Annotations[AnnotationIP] = ip.Unmap().String()
	setServices(c, services)
	setHolder(c, holder, now)
	setSuccessor(c, successor)
	var moves int32
	if t := c.Spec.LeaseTransitions; t != nil {
		moves = *t
	}
	moves++
	c.Spec.LeaseTransitions = &moves
	return c
}

// WithMoveTo returns a copy of l that asks its holder to move the IP to
// node; an empty node withdraws the request.
func WithMoveTo(l *coordinationv1.Lease, node string) *coordinationv1.Lease {
	c := l.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	if node == "" {
		delete(c.Annotations, AnnotationMoveTo)
	} else {
		c.Annotations[AnnotationMoveTo] = node
	}
	return c
}

// WithOwner returns a copy of l that records service ("namespace/name",
// "" for none) and its uid as the owner of its IP.
func WithOwner(l *coordinationv1.Lease, service string, uid types.UID) *coordinationv1.Lease {
	c := l.DeepCopy()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	if service == "" {
		delete(c.Annotations, AnnotationOwner)
		delete(c.Annotations, AnnotationOwnerUID)
		return c
	}
	c.Annotations[AnnotationOwner] = service
	c.Annotations[AnnotationOwnerUID] = string(uid)
	return c
}

// WithSuccessor returns a copy of l that names successor ("" for none).
func WithSuccessor(l *coordinationv1.Lease, successor string) *coordinationv1.Lease {
	c := l.DeepCopy()
	setSuccessor(c, successor)
	return c
}

func setSuccessor(l *coordinationv1.Lease, successor string) {
	if successor == "" {
		delete(l.Annotations, AnnotationSuccessor)
		return
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationSuccessor] = successor
}

func setServices(l *coordinationv1.Lease, services []string) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	s := slices.Clone(services)
	slices.Sort(s)
	l.Annotations[AnnotationServices] = strings.Join(slices.Compact(s), ",")
}

func setHolder(l *coordinationv1.Lease, holder string, now time.Time) {
	h := holder
	l.Spec.HolderIdentity = &h
	t := metav1.NewMicroTime(now)
	l.Spec.AcquireTime = &t
}

// Heartbeat is the content of a node heartbeat Lease.
type Heartbeat struct {
	Node      string
	Duration  time.Duration // the node's lease duration; judged against by observers
	RenewTime time.Time     // the node's own clock; only that node may compare it with its clock
	Eligible  bool
	Error     string
	Held      int
	// BGP is the node's BGP sessions, see ParseBGPSessions.
	BGP string
	// MACs are the link-layer addresses of the node's interfaces (see
	// ParseMACs); Conflicts the IPs the node holds but does not bind, each
	// with the MAC of the stranger answering for it, and Claims the IPs it
	// binds that a stranger claims too (see ParseAnswers). They are kept
	// as written, so that a Heartbeat stays comparable.
	MACs, Conflicts, Claims string
	// Wire is the node's report of the IPs it checks on the wire
	// (wire.ParseReport), WireChecked when it last checked them all (zero:
	// unknown); CheckRequest and CheckDone a fresh check asked of it, and
	// the last one it did (AnnotationCheckRequest).
	Wire                    string
	WireChecked             time.Time
	CheckRequest, CheckDone string
	// LivenessPort is the UDP port of the node's liveness over the LAN, 0
	// when it has none (docs/design.md, Liveness over the LAN).
	LivenessPort uint16
	// LivenessCurrent is whether the node's heartbeat names the current
	// format of liveness datagrams (AnnotationLivenessFormat): false for
	// an eipd from before it, whose datagrams carry no boot, counter or
	// destination.
	LivenessCurrent bool
	// Build is the build of the node's eipd (AnnotationBuild).
	Build string
	// Version changes with every renewal; observers compare it, never times.
	Version string
}

// ParseHeartbeat reads a heartbeat Lease.
func ParseHeartbeat(l *coordinationv1.Lease) (Heartbeat, error) {
	node, ok := NodeOf(l.Name)
	if !ok {
		return Heartbeat{}, fmt.Errorf("heartbeat %s: name does not start with %s", l.Name, heartbeatPrefix)
	}
	h := Heartbeat{
		Node:      node,
		Eligible:  l.Annotations[AnnotationEligible] == "true",
		Error:     l.Annotations[AnnotationError],
		BGP:       l.Annotations[AnnotationBGP],
		MACs:      l.Annotations[AnnotationMACs],
		Conflicts: l.Annotations[AnnotationConflicts],
		Claims:    l.Annotations[AnnotationClaims],
		Wire:      l.Annotations[AnnotationWire],
		Build:     l.Annotations[AnnotationBuild],
		Version:   l.ResourceVersion,

		CheckRequest: l.Annotations[AnnotationCheckRequest],
		CheckDone:    l.Annotations[AnnotationCheckDone],
	}
	if t, err := time.Parse(time.RFC3339, l.Annotations[AnnotationWireChecked]); err == nil {
		h.WireChecked = t
	}
	if p, err := strconv.ParseUint(l.Annotations[AnnotationLivenessPort], 10, 16); err == nil {
		h.LivenessPort = uint16(p)
	}
	if t := l.Spec.RenewTime; t != nil {
		h.LivenessCurrent = isLivenessFormatAt(l.Annotations[AnnotationLivenessFormat], t.Time)
	}
	if h.Held, _ = strconv.Atoi(l.Annotations[AnnotationHeld]); h.Held < 0 {
		h.Held = 0
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		h.Duration = time.Duration(*d) * time.Second
	}
	if t := l.Spec.RenewTime; t != nil {
		h.RenewTime = t.Time
	}
	if h.Duration == 0 {
		return h, fmt.Errorf("heartbeat %s: leaseDurationSeconds is missing", l.Name)
	}
	return h, nil
}

// HeartbeatStatus is what a node tells its peers with every renewal.
type HeartbeatStatus struct {
	Eligible bool
	Error    string
	Held     int
	// BGP is FormatBGPSessions of the node's sessions; empty without
	// route mode.
	BGP string
	// MACs is FormatMACs of the node's interfaces; Conflicts and Claims
	// are FormatAnswers of the IPs it does not bind because a stranger
	// answers for them, and of those it binds that a stranger claims.
	MACs, Conflicts, Claims string
	// Wire is wire.Report.Format of the IPs the node checks; WireChecked
	// when it last checked them all (zero: not yet), which alone is no
	// reason to renew; CheckDone the last check request it answered.
	Wire        string
	WireChecked time.Time
	CheckDone   string
	// LivenessPort is the UDP port of liveness over the LAN; 0 without.
	LivenessPort uint16
	// Build is the build of this eipd (AnnotationBuild).
	Build string
}

// livenessFormatAt is AnnotationLivenessFormat written by a renewal at t.
// Microseconds: a Lease keeps its renewTime to the microsecond.
func livenessFormatAt(t time.Time) string {
	return LivenessFormat + "@" + strconv.FormatInt(t.UnixMicro(), 10)
}

// isLivenessFormatAt says whether v is livenessFormatAt(t), without making
// that string: every pass reads every peer's heartbeat.
func isLivenessFormatAt(v string, t time.Time) bool {
	us, ok := strings.CutPrefix(v, LivenessFormat+"@")
	// FormatInt writes no sign but a minus, and no leading zero.
	if !ok || us == "" || us[0] == '+' || len(us) > 1 && (us[0] == '0' || us[:2] == "-0") {
		return false
	}
	n, err := strconv.ParseInt(us, 10, 64)
	return err == nil && n == t.UnixMicro()
}

// RenewedHeartbeat returns the heartbeat Lease of node renewed at now: a copy
// of current (nil when it does not exist yet) with the duration, renew time
// and status set. leaseDurationSeconds is an integer, so the duration rounds
// up to whole seconds.
func RenewedHeartbeat(current *coordinationv1.Lease, namespace, node string, duration time.Duration, st HeartbeatStatus, now time.Time) *coordinationv1.Lease {
	var l *coordinationv1.Lease
	if current == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name:      HeartbeatName(node),
			Namespace: namespace,
			Labels:    map[string]string{ManagedByLabel: ManagedBy, RoleLabel: RoleHeartbeat},
		}}
		t := metav1.NewMicroTime(now)
		l.Spec.AcquireTime = &t
	} else {
		l = current.DeepCopy()
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationEligible] = strconv.FormatBool(st.Eligible)
	l.Annotations[AnnotationHeld] = strconv.Itoa(st.Held)
	if st.Error == "" {
		delete(l.Annotations, AnnotationError)
	} else {
		l.Annotations[AnnotationError] = st.Error
	}
	var checked string
	if !st.WireChecked.IsZero() {
		checked = st.WireChecked.UTC().Format(time.RFC3339)
	}
	for key, v := range map[string]string{AnnotationBGP: st.BGP, AnnotationMACs: st.MACs, AnnotationConflicts: st.Conflicts, AnnotationClaims: st.Claims,
		AnnotationWire: st.Wire, AnnotationWireChecked: checked, AnnotationCheckDone: st.CheckDone, AnnotationBuild: st.Build} {
		if v == "" {
			delete(l.Annotations, key)
		} else {
			l.Annotations[key] = v
		}
	}
	if st.LivenessPort == 0 {
		delete(l.Annotations, AnnotationLivenessPort)
		delete(l.Annotations, AnnotationLivenessFormat)
	} else {
		l.Annotations[AnnotationLivenessPort] = strconv.Itoa(int(st.LivenessPort))
		l.Annotations[AnnotationLivenessFormat] = livenessFormatAt(now)
	}
	holder := node
	l.Spec.HolderIdentity = &holder
	secs := int32((duration + time.Second - 1) / time.Second)
	l.Spec.LeaseDurationSeconds = &secs
	t := metav1.NewMicroTime(now)
	l.Spec.RenewTime = &t
	return l
}

// Newer reports whether resourceVersion a is newer than b. Kubernetes
// resource versions from one etcd are increasing integers; an unparsable one
// is treated as not newer, so callers fall back to what the API server says.
func Newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}
