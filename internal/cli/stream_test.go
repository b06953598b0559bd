package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// encode is obj as the API server sends it in protobuf.
func encode(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	assert.NilError(t, protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &b))
	return b.Bytes()
}

func managed() []metav1.ManagedFieldsEntry {
	return []metav1.ManagedFieldsEntry{{Manager: "eipd", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:holderIdentity":{}}}`)}}}
}

// withBookkeeping is obj with the metadata the API server adds and status
// never reads.
func withBookkeeping[T metav1.Object](obj T) T {
	obj.SetUID("0b6d3d0c-6a3e-4a43-9d67-5b0a8e4b4f0b")
	obj.SetCreationTimestamp(metav1.NewTime(now))
	obj.SetGeneration(3)
	obj.SetFinalizers([]string{"example.com/keep"})
	obj.SetManagedFields(managed())
	return obj
}

// A list of Leases comes back as its valid locks, parsed as lease.ParseLock
// parses them, and the other Leases as the typed decoder reads them,
// without the metadata status never reads.
func TestReadLeaseList(t *testing.T) {
	list := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "c"}}
	wantLocks := map[netip.Addr]*lease.Lock{}
	for i := range 300 {
		l := lock(fmt.Sprintf("198.18.100.%d", i%250+1), "node-1", int32(i), now.Add(-time.Minute), "default/svc")
		if i%250 != i {
			l = lock(fmt.Sprintf("2001:db8::100:%x", i), "node-2", int32(i), now.Add(-time.Minute), "default/svc", "web/api")
		}
		if i%7 == 0 {
			l = withMoveTo(l, "node-3")
		}
		l.ResourceVersion = fmt.Sprint(1000 + i)
		list.Items = append(list.Items, *withBookkeeping(l))
		lk, err := lease.ParseLock(l)
		assert.NilError(t, err)
		wantLocks[lk.IP] = &lk
	}
	damaged := lock("198.18.100.8", "node-3", 0, now.Add(-time.Hour))
	damaged.Annotations[lease.AnnotationIP] = "garbage"
	other := lock("198.18.100.9", "node-3", 0, now)
	other.Labels[lease.RoleLabel] = "something-else"
	wantOthers := []*coordinationv1.Lease{heartbeat("node-1", now, true, "", 3), damaged, other, heartbeat("node-2", now, false, "no link", 0)}
	for i, l := range wantOthers {
		list.Items = slices.Insert(list.Items, i*90, *withBookkeeping(l.DeepCopy()))
	}

	others, locks, err := readLeaseList(bytes.NewReader(encode(t, list)))
	assert.NilError(t, err)
	assert.DeepEqual(t, locks, wantLocks, cmpopts.EquateComparable(netip.Addr{}))
	assert.DeepEqual(t, others, wantOthers)

	others, locks, err = readLeaseList(bytes.NewReader(encode(t, &coordinationv1.LeaseList{})))
	assert.NilError(t, err)
	assert.Equal(t, len(others)+len(locks), 0)
}

// A list of Services comes back as the IPs each names, as ipset.EachIP
// reads them from the whole Service.
func TestReadServiceList(t *testing.T) {
	class := "example.com/other"
	ours := loadBalancer("web", "ours", "198.18.100.3", "2001:db8::100:3")
	ours.Spec.LoadBalancerClass = ptr.To(ipset.LoadBalancerClass)
	ours.Spec.ExternalIPs = []string{"198.18.100.10"}
	ours.Status.LoadBalancer.Ingress = append(ours.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{Hostname: "lb.example.com"})
	ours.Status.LoadBalancer.Ingress[0].Hostname = "also.example.com"
	ours.Status.LoadBalancer.Ingress[0].Ports = []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}}
	ours.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(now), Reason: "Bound"}}
	theirs := loadBalancer("web", "theirs", "198.18.100.5")
	theirs.Spec.LoadBalancerClass = &class
	theirs.Spec.ExternalIPs = []string{"198.18.100.6"}
	list := &corev1.ServiceList{}
	var want []ipset.Claim
	for i, s := range []*corev1.Service{
		externalIPs("default", "a", "198.18.100.1"),
		externalIPs("default", "plain"),
		externalIPs("web", "b", "198.18.100.2", "2001:db8::100:2", "not an IP"),
		ours,
		loadBalancer("web", "pending"),
		theirs,
		loadBalancer("web", "unclassed", "198.18.100.4"),
	} {
		s = withBookkeeping(s.DeepCopy())
		s.CreationTimestamp = metav1.NewTime(now.Add(time.Duration(i) * time.Second))
		s.Labels = map[string]string{"app": "web"}
		s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"Service"}`}
		if i%2 == 0 {
			s.Annotations[ipset.AnnotationSharingKey] = fmt.Sprintf("key-%d", i)
			s.Annotations[ipset.AnnotationPreferredNodes] = "node-b,node-a"
		}
		if i%3 == 0 {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Annotations[ipset.AnnotationShareWith] = "team-b, team-c"
		}
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080), NodePort: 30080},
			{Name: "dns", Port: 53 + int32(i), Protocol: corev1.ProtocolUDP},
		}
		s.Spec.Selector = map[string]string{"app": "web"}
		ipset.EachIP(ipset.ServiceOf(s), func(c ipset.Claim) { want = append(want, c) })
		list.Items = append(list.Items, *s)
	}
	assert.Equal(t, len(want), 9)
	got, err := readServiceList(bytes.NewReader(encode(t, list)))
	assert.NilError(t, err)
	assert.DeepEqual(t, got, want)
}

// The status built from the lists as the API server encodes them is the
// one built from the typed objects: the decoders keep every field status
// reads.
func TestStatusFromEncodedLists(t *testing.T) {
	typed := snapshot{namespace: ns, configMap: DefaultConfigMap}
	leases, services := &coordinationv1.LeaseList{}, &corev1.ServiceList{}
	for _, obj := range fixture() {
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			typed.cm = o
		case *corev1.Node:
			typed.nodes = append(typed.nodes, o)
		case *coordinationv1.Lease:
			typed.leases = append(typed.leases, o)
			leases.Items = append(leases.Items, *withBookkeeping(o.DeepCopy()))
		case *corev1.Service:
			typed.services = append(typed.services, o)
			services.Items = append(services.Items, *withBookkeeping(o.DeepCopy()))
		}
	}
	read := typed
	var err error
	read.leases, read.locks, err = readLeaseList(bytes.NewReader(encode(t, leases)))
	assert.NilError(t, err)
	assert.Assert(t, len(read.locks) > 0 && len(read.leases) > 0)
	read.services = nil
	read.claims, err = readServiceList(bytes.NewReader(encode(t, services)))
	assert.NilError(t, err)
	for _, format := range []string{outputWide, outputJSON} {
		var want, got bytes.Buffer
		assert.NilError(t, printStatus(&want, buildStatus(typed, now), format))
		assert.NilError(t, printStatus(&got, buildStatus(read, now), format))
		assert.Equal(t, got.String(), want.String(), format)
	}
}

// An answer cut short is an error, wherever it ends, never a shorter list:
// only the envelope's empty trailing fields may be missing.
func TestReadItemsTruncated(t *testing.T) {
	list := &coordinationv1.LeaseList{}
	for i := range 3 {
		list.Items = append(list.Items, *lock(fmt.Sprintf("198.18.100.%d", i+1), "node-1", 0, now, "default/svc"))
	}
	b := encode(t, list)
	errs := 0
	for n := range len(b) {
		others, locks, err := readLeaseList(bytes.NewReader(b[:n]))
		if err != nil {
			errs++
			continue
		}
		assert.Equal(t, len(others)+len(locks), len(list.Items), "cut at %d of %d bytes", n, len(b))
	}
	assert.Assert(t, errs >= len(b)-4, "%d of %d cuts refused", errs, len(b))
}

// JSON, or anything else, is refused rather than read as garbage.
func TestReadItemsNotProtobuf(t *testing.T) {
	_, err := readServiceList(bytes.NewReader([]byte(`{"kind":"ServiceList","apiVersion":"v1","items":[]}`)))
	assert.ErrorContains(t, err, "not in protobuf")
	_, _, err = readLeaseList(io.LimitReader(bytes.NewReader(nil), 0))
	assert.ErrorContains(t, err, "not in protobuf")
}
