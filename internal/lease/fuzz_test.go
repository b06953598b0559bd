package lease_test

import (
	"net"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
)

// FuzzKeepRoundTrip: whatever a lock Lease says, Keep and Kept.Lease write
// back the Lease they kept: annotations and labels of others, a damaged
// lock's text, the holder and its absence, all as they were. A write
// built from a kept lock loses nothing of what others wrote.
func FuzzKeepRoundTrip(f *testing.F) {
	f.Add("eip-198-18-0-7", "198.18.0.7", "default/web", "", "node-b", "", "node-a", true, "example.com/note", "x", "team", "net", int32(9))
	f.Add("eip-198-18-0-7", "not-an-ip", "", "node-b", "", "shop/api", "", false, "", "", "", "", int32(0))
	f.Add("eip-2001-db8--5", "2001:db8::5", "a/b,c/d", "node-c", "node-b", "", "node-a", true, lease.AnnotationIP, "", "", "", int32(-1))
	f.Fuzz(func(t *testing.T, name, ip, services, moveTo, successor, reservedFor, holder string, hasHolder bool,
		otherKey, otherValue, labelKey, labelValue string, duration int32) {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: "eip-system", ResourceVersion: "7",
				Labels: map[string]string{lease.ManagedByLabel: lease.ManagedBy, lease.RoleLabel: lease.RoleLock},
				Annotations: map[string]string{
					lease.AnnotationIP: ip, lease.AnnotationServices: services, lease.AnnotationMoveTo: moveTo,
					lease.AnnotationSuccessor: successor, lease.AnnotationReservedFor: reservedFor,
				},
			},
		}
		if otherKey != "" {
			l.Annotations[otherKey] = otherValue
		}
		if labelKey != "" && labelKey != lease.ManagedByLabel && labelKey != lease.RoleLabel {
			l.Labels[labelKey] = labelValue
		}
		if hasHolder {
			l.Spec.HolderIdentity = &holder
			moves := int32(1)
			l.Spec.LeaseTransitions = &moves
		}
		if duration != 0 {
			l.Spec.LeaseDurationSeconds = &duration
		}
		k := lease.Keep(l, nil)
		back := k.Lease()
		if k.Err == nil && k.IP.String() != ip {
			// A sound lock writes its IP as eip does; the rest as it was.
			assert.Equal(t, back.Annotations[lease.AnnotationIP], k.IP.String())
			back.Annotations[lease.AnnotationIP] = ip
		}
		assert.DeepEqual(t, back, l)
		again := lease.Keep(k.Lease(), nil)
		assert.Check(t, again.Lock == k.Lock, "%+v, then %+v", k.Lock, again.Lock)
		assert.Equal(t, again.Err == nil, k.Err == nil)
	})
}

// FuzzParseHeartbeat: whatever a heartbeat Lease says, it is read without
// a panic, and what is read is within bounds.
func FuzzParseHeartbeat(f *testing.F) {
	f.Add("eip-node-a", "true", "3", "9403", "2@1700000000000000", "eth0=02:00:00:00:00:01", "198.18.0.7=02:00:00:00:00:02", int32(2), int64(1700000000000000))
	f.Add("eip-node-", "", "-1", "70000", "", "", "", int32(0), int64(0))
	f.Fuzz(func(t *testing.T, name, eligible, held, port, format, macs, conflicts string, duration int32, renewMicro int64) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			lease.AnnotationEligible: eligible, lease.AnnotationHeld: held, lease.AnnotationLivenessPort: port,
			lease.AnnotationLivenessFormat: format, lease.AnnotationMACs: macs, lease.AnnotationConflicts: conflicts,
		}}}
		if duration != 0 {
			l.Spec.LeaseDurationSeconds = &duration
		}
		if renewMicro != 0 {
			rt := metav1.NewMicroTime(time.UnixMicro(renewMicro))
			l.Spec.RenewTime = &rt
		}
		h, err := lease.ParseHeartbeat(l)
		if err != nil {
			assert.Assert(t, err.Error() != "")
			return
		}
		node, ok := lease.NodeOf(name)
		assert.Assert(t, ok)
		assert.Equal(t, h.Node, node)
		assert.Assert(t, h.Duration > 0 && h.Held >= 0, "%+v", h)
		assert.Equal(t, h.Eligible, eligible == "true")
	})
}

// FuzzParseAnswers: what ParseAnswers reads is sound (unmapped IPs, MACs as
// net.HardwareAddr writes them), and FormatAnswers writes it back as
// ParseAnswers reads it.
func FuzzParseAnswers(f *testing.F) {
	f.Add("198.18.0.7=02:00:00:00:00:01,2001:db8::5=02:00:00:00:00:02")
	f.Add("::ffff:198.18.0.7=02-00-00-00-00-01,,=,x=y,198.18.0.8")
	f.Fuzz(func(t *testing.T, s string) {
		m := lease.ParseAnswers(s)
		for ip, mac := range m {
			assert.Assert(t, ip.IsValid() && !ip.Is4In6(), "%v", ip)
			hw, err := net.ParseMAC(mac)
			assert.NilError(t, err)
			assert.Equal(t, hw.String(), mac)
		}
		if len(m) > 0 && len(m) <= 64 {
			assert.DeepEqual(t, lease.ParseAnswers(lease.FormatAnswers(m)), m)
		}
	})
}
