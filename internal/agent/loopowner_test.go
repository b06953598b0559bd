package agent

import (
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/eip-project/eip/internal/lease"
)

// A lock records the Service that owns its IP, and its holder keeps the
// record current: a Service of another namespace, older, edited to name
// the address is refused, with an Event, and nothing moves or is written;
// once the recorded owner no longer names the address, the oldest Service
// naming it owns it, and the holder records that.
func TestLoopLockRecordsItsOwner(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	ip := testIP(0)
	web := namingService("team-a", "web", t0.Add(time.Hour), ip.String())
	w.putService(web)
	w.s.sched.dirtySvc = true
	w.pass()
	for range 4 {
		w.tick()
	}
	assert.DeepEqual(t, w.take(), []string{"create " + leaseName(ip) + " holder=node-a", "bind " + ip.String()})
	assert.DeepEqual(t, recordedOwner(w, leaseName(ip)), [2]string{"team-a/web", "team-a-web"})

	w.putService(namingService("team-b", "steal", t0, ip.String()))
	w.s.sched.dirtySvc = true
	w.pass()
	assert.DeepEqual(t, w.take(), []string(nil))
	assert.DeepEqual(t, recordedOwner(w, leaseName(ip)), [2]string{"team-a/web", "team-a-web"})
	assert.Equal(t, w.s.desired.entries[ip].Owner.Service, "team-a/web")
	rejected := warnings(w, "AddressRejected")
	assert.Assert(t, len(rejected) == 1 && strings.Contains(rejected[0], ip.String()+" is not bound by eip: held for team-a/web, of another namespace"), "%q", rejected)

	moved := web.DeepCopy()
	moved.Spec.ExternalIPs, moved.ResourceVersion = nil, w.nextRV()
	w.putService(moved)
	w.s.sched.dirtySvc = true
	w.pass()
	assert.DeepEqual(t, w.take(), []string{"update " + leaseName(ip) + " holder=node-a"})
	assert.DeepEqual(t, recordedOwner(w, leaseName(ip)), [2]string{"team-b/steal", "team-b-steal"})
}

// namingService is Service ns/name, created at created, naming ips in
// spec.externalIPs; its UID is "ns-name".
func namingService(ns, name string, created time.Time, ips ...string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name), ResourceVersion: "1", CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.ServiceSpec{ExternalIPs: ips, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
}

// recordedOwner is the owner lock name records, and its UID.
func recordedOwner(w *world, name string) [2]string {
	l := w.get(name)
	if l == nil {
		w.t.Fatalf("no lock %s", name)
	}
	return [2]string{l.Annotations[lease.AnnotationOwner], l.Annotations[lease.AnnotationOwnerUID]}
}

// warnings drains the Events the loop posted and returns the Warnings of
// reason.
func warnings(w *world, reason string) []string {
	var out []string
	ch := w.a.recorder.(*record.FakeRecorder).Events
	for {
		select {
		case e := <-ch:
			if msg, ok := strings.CutPrefix(e, corev1.EventTypeWarning+" "+reason+" "); ok {
				out = append(out, msg)
			}
		default:
			return out
		}
	}
}

// The owner a lock records is an input of ownership as the Services are:
// a node that computed the oldest Service as the owner, before the lock
// recording another one reached it, computes again when it does.
func TestLoopRecordedOwnerIsAnInput(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	ip := testIP(0)
	w.putService(namingService("team-a", "web", t0.Add(time.Hour), ip.String()))
	w.putService(namingService("team-b", "steal", t0, ip.String()))
	w.s.sched.dirtySvc = true
	w.lock(ip, "node-b")
	w.pass()
	assert.Equal(t, w.s.desired.entries[ip].Owner.Service, "team-b/steal")

	prev := w.get(leaseName(ip))
	l := lease.WithOwner(prev, "team-a/web", "team-a-web")
	l.ResourceVersion = w.nextRV()
	w.must(w.leases.Update(l))
	w.leaseWritten(prev, l)
	w.tick("node-b")
	assert.Equal(t, w.s.desired.entries[ip].Owner.Service, "team-a/web")
	assert.DeepEqual(t, w.take(), []string(nil))
}
