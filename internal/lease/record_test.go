package lease_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/eip-project/eip/internal/lease"
)

const ns = "eip-system"

// at is a fixed instant plus d: tests use plain time values, never the wall clock.
func at(d time.Duration) time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(d) }

// addrs lets go-cmp compare netip.Addr, whose fields are unexported.
func addrs() cmp.Option { return cmpopts.EquateComparable(netip.Addr{}) }

func TestNewLockLeaseParses(t *testing.T) {
	ip := netip.MustParseAddr("2001:db8::5")
	l := lease.NewLockLease(ns, ip, "node-a", "", []string{"b/svc", "a/svc", "b/svc"}, at(0))
	assert.Equal(t, l.Name, "eip-2001-db8--5")
	assert.Equal(t, l.Namespace, ns)
	assert.Equal(t, l.Labels[lease.ManagedByLabel], lease.ManagedBy)
	assert.Equal(t, l.Labels[lease.RoleLabel], lease.RoleLock)
	assert.Equal(t, *l.Spec.LeaseTransitions, int32(0))

	l.ResourceVersion = "42"
	lk, err := lease.ParseLock(l)
	assert.NilError(t, err)
	assert.DeepEqual(t, lk, lease.Lock{
		Name:            "eip-2001-db8--5",
		IP:              ip,
		Holder:          "node-a",
		MovedAt:         at(0),
		ResourceVersion: "42",
	}, addrs())
	assert.Equal(t, l.Annotations[lease.AnnotationServices], "a/svc,b/svc")
}

func TestParseLockEmptyHolderAndNoServices(t *testing.T) {
	l := lease.NewLockLease(ns, netip.MustParseAddr("10.0.0.5"), "", "", nil, at(0))
	lk, err := lease.ParseLock(l)
	assert.NilError(t, err)
	assert.Equal(t, lk.Holder, "")
	assert.Equal(t, l.Annotations[lease.AnnotationServices], "")
}

func TestParseLockIPv4MappedAnnotation(t *testing.T) {
	l := lockLease("eip-10-0-0-5", "::ffff:10.0.0.5")
	lk, err := lease.ParseLock(l)
	assert.NilError(t, err)
	assert.Equal(t, lk.IP, netip.MustParseAddr("10.0.0.5"))
	assert.Assert(t, lk.IP.Is4())
}

func TestParseLockRejects(t *testing.T) {
	missing := lockLease("eip-10-0-0-5", "")
	delete(missing.Annotations, lease.AnnotationIP)
	for _, tc := range []struct {
		name string
		l    *coordinationv1.Lease
		want string
	}{
		{"missing annotation", missing, `lock eip-10-0-0-5: annotation eip.io/ip="" is not an IP address`},
		{"garbage annotation", lockLease("eip-10-0-0-5", "ten.zero"), `lock eip-10-0-0-5: annotation eip.io/ip="ten.zero" is not an IP address`},
		{"CIDR annotation", lockLease("eip-10-0-0-5", "10.0.0.5/32"), `lock eip-10-0-0-5: annotation eip.io/ip="10.0.0.5/32" is not an IP address`},
		{"other IP", lockLease("eip-10-0-0-5", "10.0.0.6"), `lock eip-10-0-0-5: annotation eip.io/ip="10.0.0.6" belongs to a lock named eip-10-0-0-6`},
		{"no annotations at all", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "eip-10-0-0-5"}}, `lock eip-10-0-0-5: annotation eip.io/ip="" is not an IP address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lease.ParseLock(tc.l)
			assert.Error(t, err, tc.want)
		})
	}
}

func lockLease(name, ip string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Namespace:   ns,
		Annotations: map[string]string{lease.AnnotationIP: ip},
	}}
}

func TestWithHolder(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	orig := lease.NewLockLease(ns, ip, "node-a", "", []string{"x/one"}, at(0))
	orig = lease.WithMoveTo(orig, "node-b")
	orig.ResourceVersion = "7"
	two := int32(2)
	orig.Spec.LeaseTransitions = &two

	later := at(time.Minute)
	got := lease.WithHolder(orig, ip, "node-b", "", []string{"y/two", "x/one"}, later)

	lk, err := lease.ParseLock(got)
	assert.NilError(t, err)
	assert.DeepEqual(t, lk, lease.Lock{
		Name:            "eip-10-0-0-5",
		IP:              ip,
		Holder:          "node-b",
		Moves:           3,
		MovedAt:         later,
		ResourceVersion: "7",
	}, addrs())
	assert.Equal(t, got.Annotations[lease.AnnotationServices], "x/one,y/two")
	// The original is untouched: callers keep their cached copy intact.
	before, err := lease.ParseLock(orig)
	assert.NilError(t, err)
	assert.Equal(t, before.Holder, "node-a")
	assert.Equal(t, before.MoveTo, "node-b")
	assert.Equal(t, before.Moves, int32(2))
}

func TestWithHolderWithoutTransitions(t *testing.T) {
	l := lockLease("eip-10-0-0-5", "10.0.0.5")
	got := lease.WithHolder(l, netip.MustParseAddr("10.0.0.5"), "node-a", "", nil, at(0))
	assert.Equal(t, *got.Spec.LeaseTransitions, int32(1))
	assert.Equal(t, *got.Spec.HolderIdentity, "node-a")
}

// A lock whose IP annotation was damaged by hand is repaired by the next
// ownership change, which knows the IP from the lock's name.
func TestWithHolderRepairsIP(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	damaged := lockLease("eip-10-0-0-5", "garbage")
	_, err := lease.ParseLock(damaged)
	assert.ErrorContains(t, err, "is not an IP address")

	lk, err := lease.ParseLock(lease.WithHolder(damaged, ip, "node-a", "", nil, at(0)))
	assert.NilError(t, err)
	assert.Equal(t, lk.IP, ip)

	bare := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "eip-10-0-0-5"}}
	lk, err = lease.ParseLock(lease.WithHolder(bare, netip.MustParseAddr("::ffff:10.0.0.5"), "node-a", "", nil, at(0)))
	assert.NilError(t, err)
	assert.Equal(t, lk.IP, ip)
}

func TestWithMoveTo(t *testing.T) {
	l := lockLease("eip-10-0-0-5", "10.0.0.5")
	l.Annotations = nil
	l.Name = "eip-10-0-0-5"
	asked := lease.WithMoveTo(l, "node-c")
	assert.Equal(t, asked.Annotations[lease.AnnotationMoveTo], "node-c")
	assert.Assert(t, l.Annotations == nil, "WithMoveTo changed its input")

	cleared := lease.WithMoveTo(asked, "")
	_, ok := cleared.Annotations[lease.AnnotationMoveTo]
	assert.Assert(t, !ok)
	assert.Equal(t, asked.Annotations[lease.AnnotationMoveTo], "node-c")
}

// A lock records the Service that owns its IP, kept through a change of
// holder, and reads it back; recording none removes it.
func TestWithOwner(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.5")
	l := lease.NewLockLease(ns, ip, "node-a", "", []string{"a/web"}, at(0))
	owned := lease.WithOwner(l, "a/web", "uid-1")
	_, ok := l.Annotations[lease.AnnotationOwner]
	assert.Assert(t, !ok, "WithOwner changed its input")
	moved := lease.WithHolder(owned, ip, "node-b", "", []string{"a/web"}, at(1))
	lk, err := lease.ParseLock(moved)
	assert.NilError(t, err)
	assert.Equal(t, lk.Owner, "a/web")
	assert.Equal(t, lk.OwnerUID, types.UID("uid-1"))

	lk, err = lease.ParseLock(lease.WithOwner(moved, "", ""))
	assert.NilError(t, err)
	assert.Equal(t, lk.Owner, "")
	assert.Equal(t, lk.OwnerUID, types.UID(""))
}

// The liveness format counts only with the renewal that wrote it: an
// eipd from before it renews its heartbeat keeping the annotation (as
// after a rollback), and its node no longer speaks that format.
func TestHeartbeatLivenessFormatGoesWithItsRenewal(t *testing.T) {
	now := at(1500 * time.Microsecond).Add(700) // nanoseconds a Lease drops
	l := lease.RenewedHeartbeat(nil, ns, "node-a", time.Second, lease.HeartbeatStatus{LivenessPort: 9403}, now)
	stored := metav1.NewMicroTime(now.Truncate(time.Microsecond))
	l.Spec.RenewTime = &stored
	h, err := lease.ParseHeartbeat(l)
	assert.NilError(t, err)
	assert.Assert(t, h.LivenessCurrent)

	renewedByOld := l.DeepCopy()
	later := metav1.NewMicroTime(now.Add(time.Second))
	renewedByOld.Spec.RenewTime = &later
	h, err = lease.ParseHeartbeat(renewedByOld)
	assert.NilError(t, err)
	assert.Assert(t, !h.LivenessCurrent)
}

func TestHeartbeatRoundTrip(t *testing.T) {
	created := lease.RenewedHeartbeat(nil, ns, "node-a", 1500*time.Millisecond,
		lease.HeartbeatStatus{Eligible: true, Held: 12, LivenessPort: 9403, Build: "v0.1.0 (commit 0bef168f1a2b, go1.26.0)"}, at(0))
	assert.Equal(t, created.Name, "eip-node-node-a")
	assert.Equal(t, created.Namespace, ns)
	assert.Equal(t, created.Labels[lease.RoleLabel], lease.RoleHeartbeat)
	assert.Equal(t, created.Labels[lease.ManagedByLabel], lease.ManagedBy)
	assert.Equal(t, *created.Spec.LeaseDurationSeconds, int32(2), "1.5 s rounds up")
	assert.Equal(t, created.Spec.AcquireTime.Time, at(0))
	created.ResourceVersion = "100"

	h, err := lease.ParseHeartbeat(created)
	assert.NilError(t, err)
	assert.DeepEqual(t, h, lease.Heartbeat{
		Node: "node-a", Duration: 2 * time.Second, RenewTime: at(0),
		Eligible: true, Held: 12, LivenessPort: 9403, LivenessCurrent: true, Build: "v0.1.0 (commit 0bef168f1a2b, go1.26.0)", Version: "100",
	})

	later := at(500 * time.Millisecond)
	renewed := lease.RenewedHeartbeat(created, ns, "node-a", 2*time.Second,
		lease.HeartbeatStatus{Error: "interface eth9 not found"}, later)
	assert.Equal(t, renewed.ResourceVersion, "100", "renewal keeps the precondition")
	assert.Equal(t, renewed.Spec.AcquireTime.Time, at(0), "acquire time is the creation")
	h, err = lease.ParseHeartbeat(renewed)
	assert.NilError(t, err)
	assert.DeepEqual(t, h, lease.Heartbeat{
		Node: "node-a", Duration: 2 * time.Second, RenewTime: later,
		Error: "interface eth9 not found", Version: "100",
	})

	lan := lease.RenewedHeartbeat(renewed, ns, "node-a", 2*time.Second, lease.HeartbeatStatus{
		MACs:      lease.FormatMACs([]net.HardwareAddr{{2, 0, 0, 0, 0, 0xb}, {2, 0, 0, 0, 0, 0xa}, {2, 0, 0, 0, 0, 0xb}}),
		Conflicts: lease.FormatAnswers(map[netip.Addr]string{netip.MustParseAddr("198.18.0.9"): "02:ee:00:00:00:01", netip.MustParseAddr("198.18.0.10"): "02:ee:00:00:00:02"}),
		Claims:    lease.FormatAnswers(map[netip.Addr]string{netip.MustParseAddr("2001:db8::5"): "02:ee:00:00:00:03"}),
	}, later)
	assert.Equal(t, lan.Annotations[lease.AnnotationMACs], "02:00:00:00:00:0a,02:00:00:00:00:0b")
	assert.Equal(t, lan.Annotations[lease.AnnotationConflicts], "198.18.0.9=02:ee:00:00:00:01,198.18.0.10=02:ee:00:00:00:02", "sorted by address")
	lan.Annotations[lease.AnnotationClaims] += ",garbage,198.18.0.1=not-a-mac"
	h, err = lease.ParseHeartbeat(lan)
	assert.NilError(t, err)
	assert.DeepEqual(t, lease.ParseMACs(h.MACs), []string{"02:00:00:00:00:0a", "02:00:00:00:00:0b"})
	assert.DeepEqual(t, lease.ParseAnswers(h.Conflicts), map[netip.Addr]string{netip.MustParseAddr("198.18.0.9"): "02:ee:00:00:00:01", netip.MustParseAddr("198.18.0.10"): "02:ee:00:00:00:02"})
	assert.DeepEqual(t, lease.ParseAnswers(h.Claims), map[netip.Addr]string{netip.MustParseAddr("2001:db8::5"): "02:ee:00:00:00:03"}) // malformed entries are skipped

	healed := lease.RenewedHeartbeat(lan, ns, "node-a", time.Second, lease.HeartbeatStatus{Eligible: true}, later)
	for _, key := range []string{lease.AnnotationError, lease.AnnotationMACs, lease.AnnotationConflicts, lease.AnnotationClaims} {
		_, ok := healed.Annotations[key]
		assert.Assert(t, !ok, "a cleared %s leaves no annotation", key)
	}
	_, ok := lan.Annotations[lease.AnnotationLivenessPort]
	assert.Assert(t, !ok, "a node without liveness over the LAN names no port")
	assert.Equal(t, *healed.Spec.LeaseDurationSeconds, int32(1))
}

func TestHeartbeatWire(t *testing.T) {
	checked := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	hb := lease.RenewedHeartbeat(nil, ns, "node-a", time.Second, lease.HeartbeatStatus{
		Wire: "198.18.0.10=none@1765112400", WireChecked: checked, CheckDone: "t1",
	}, at(0))
	hb.Annotations[lease.AnnotationCheckRequest] = "t2" // by kubectl eip check
	h, err := lease.ParseHeartbeat(hb)
	assert.NilError(t, err)
	assert.Equal(t, h.Wire, "198.18.0.10=none@1765112400")
	assert.Equal(t, h.WireChecked, checked)
	assert.Equal(t, h.CheckDone, "t1")
	assert.Equal(t, h.CheckRequest, "t2")

	renewed := lease.RenewedHeartbeat(hb, ns, "node-a", time.Second, lease.HeartbeatStatus{}, at(time.Second))
	assert.Equal(t, renewed.Annotations[lease.AnnotationCheckRequest], "t2", "a renewal keeps the request it has not answered")
	for _, key := range []string{lease.AnnotationWire, lease.AnnotationWireChecked, lease.AnnotationCheckDone} {
		_, ok := renewed.Annotations[key]
		assert.Assert(t, !ok, "a cleared %s leaves no annotation", key)
	}
}

func TestHeartbeatDurationRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int32
	}{
		{time.Second, 1}, {time.Second + time.Nanosecond, 2}, {999 * time.Millisecond, 1}, {10 * time.Second, 10},
	} {
		l := lease.RenewedHeartbeat(nil, ns, "n", tc.d, lease.HeartbeatStatus{}, at(0))
		assert.Equal(t, *l.Spec.LeaseDurationSeconds, tc.want, tc.d)
	}
}

func TestParseHeartbeatRejects(t *testing.T) {
	noDuration := lease.RenewedHeartbeat(nil, ns, "node-a", time.Second, lease.HeartbeatStatus{}, at(0))
	noDuration.Spec.LeaseDurationSeconds = nil
	_, err := lease.ParseHeartbeat(noDuration)
	assert.Error(t, err, "heartbeat eip-node-node-a: leaseDurationSeconds is missing")

	wrongName := lease.RenewedHeartbeat(nil, ns, "node-a", time.Second, lease.HeartbeatStatus{}, at(0))
	wrongName.Name = "eip-10-0-0-5"
	_, err = lease.ParseHeartbeat(wrongName)
	assert.Error(t, err, "heartbeat eip-10-0-0-5: name does not start with eip-node-")

	negative := lease.RenewedHeartbeat(nil, ns, "node-a", time.Second, lease.HeartbeatStatus{}, at(0))
	negative.Annotations[lease.AnnotationHeld] = "-3"
	h, err := lease.ParseHeartbeat(negative)
	assert.NilError(t, err)
	assert.Equal(t, h.Held, 0)
}

func TestNewer(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"10", "9", true}, // numeric, not lexical
		{"9", "10", false},
		{"5", "5", false},
		{"", "5", false},
		{"5", "", false},
		{"abc", "1", false},
	} {
		assert.Equal(t, lease.Newer(tc.a, tc.b), tc.want, "Newer(%q, %q)", tc.a, tc.b)
	}
}
