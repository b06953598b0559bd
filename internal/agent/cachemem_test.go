package agent

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
)

// BenchmarkCacheBytes is the heap that eipd's caches hold for each IP of
// the 10,000-IP benchmark: its Service, its lock and its Service's
// EndpointSlice, as the API server sends them (protobuf, managedFields
// included), passed through the informers' transform and stored in an
// indexer like theirs. Most of a
// large eipd's memory is these caches.
func BenchmarkCacheBytes(b *testing.B) {
	const n = 10000
	codec := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	var svcs, locks, slices [][]byte
	for i := range n {
		svcs = append(svcs, encode(b, codec, apiServerService(i)))
		locks = append(locks, encode(b, codec, apiServerLock(i)))
		slices = append(slices, encode(b, codec, apiServerSlice(i)))
	}
	for _, c := range []struct {
		name string
		kind k8sruntime.Object
		objs [][]byte
	}{{"services", &corev1.Service{}, svcs}, {"locks", &coordinationv1.Lease{}, locks}, {"endpointslices", &discoveryv1.EndpointSlice{}, slices}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexersFor(c.kind))
				keep := newInterner().keepWhatIsRead
				for _, raw := range c.objs {
					obj, _, err := codec.Decode(raw, nil, nil)
					if err != nil {
						b.Fatal(err)
					}
					kept, _ := keep(obj)
					if err := idx.Add(kept); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(heapInUse()-before)/n, "B/IP")
				runtime.KeepAlive(idx)
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func encode(b testing.TB, codec *protobuf.Serializer, obj k8sruntime.Object) []byte {
	b.Helper()
	var buf bytes.Buffer
	if err := codec.Encode(obj, &buf); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// apiServerService is the benchmark's i-th Service as the API server
// returns it.
func apiServerService(i int) *corev1.Service {
	single, cluster := corev1.IPFamilyPolicySingleStack, corev1.ServiceInternalTrafficPolicyCluster
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("bench-%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("5d0c1a8e-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: metav1.NewTime(t0),
			Labels:        map[string]string{"eip-bench": "true"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &metav1.Time{Time: t0}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:eip-bench":{}}},"f:spec":{"f:externalIPs":{},"f:internalTrafficPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:sessionAffinity":{},"f:type":{}}}`)}}},
		},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeClusterIP,
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}},
			ClusterIP:             fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250),
			ClusterIPs:            []string{fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250)},
			ExternalIPs:           []string{testIP(i).String()},
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        &single,
			InternalTrafficPolicy: &cluster,
		},
	}
}

// apiServerLock is the lock of testIP(i) as the API server returns it.
func apiServerLock(i int) *coordinationv1.Lease {
	l := lease.NewLockLease(testNS, testIP(i), fmt.Sprintf("node-%d", i%3), "", []string{fmt.Sprintf("default/bench-%d", i)}, t0.Add(time.Second))
	l.TypeMeta = metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}
	l.UID = types.UID(fmt.Sprintf("7a1b2c3d-0000-4000-8000-%012d", i))
	l.ResourceVersion = fmt.Sprint(200000 + i)
	l.CreationTimestamp = metav1.NewTime(t0)
	l.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "eipd", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1", Time: &metav1.Time{Time: t0}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:eip.io/ip":{},"f:eip.io/services":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:eip.io/role":{}}},"f:spec":{"f:acquireTime":{},"f:holderIdentity":{},"f:leaseTransitions":{}}}`)}}}
	return l
}

// apiServerSlice is the EndpointSlice of the i-th Service as the endpoint
// controller writes it: three ready pods on three nodes.
func apiServerSlice(i int) *discoveryv1.EndpointSlice {
	yes, no, port, proto := true, false, int32(8080), corev1.ProtocolTCP
	es := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("bench-%d-x7k2p", i), Namespace: "default", GenerateName: fmt.Sprintf("bench-%d-", i),
			UID: types.UID(fmt.Sprintf("9c8b7a6d-0000-4000-8000-%012d", i)), ResourceVersion: fmt.Sprint(300000 + i), CreationTimestamp: metav1.NewTime(t0),
			Labels:          map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("bench-%d", i), discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "eip-bench": "true"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": t0.Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: fmt.Sprintf("bench-%d", i), UID: types.UID(fmt.Sprintf("5d0c1a8e-0000-4000-8000-%012d", i)), Controller: &yes, BlockOwnerDeletion: &yes}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "discovery.k8s.io/v1", Time: &metav1.Time{Time: t0}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:annotations":{".":{},"f:endpoints.kubernetes.io/last-change-trigger-time":{}},"f:generateName":{},"f:labels":{".":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{}},"f:ownerReferences":{".":{},"k:{\"uid\"}":{}}},"f:ports":{}}`)}}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
	}
	for p := range 3 {
		node, zone := fmt.Sprintf("node-%d", p), "zone-a"
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.%d.%d", p, 1+i%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
			NodeName:   &node, Zone: &zone,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("bench-%d-5d9f8-%d", i, p), UID: types.UID(fmt.Sprintf("1a2b3c4d-0000-4000-8000-%012d", 3*i+p))},
		})
	}
	return es
}

// hostileService is a tenant's Service of type typ that carries a 250 KiB
// eip.io/junk annotation, an eip.io/sharing-key of 2 KiB and 10,000 ports.
func hostileService(name string, typ corev1.ServiceType) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant", UID: "5d0c1a8e-0000-4000-8000-00000000beef", ResourceVersion: "7",
			Annotations: map[string]string{"eip.io/junk": strings.Repeat("x", 250<<10), "eip.io/sharing-key": strings.Repeat("k", 2<<10)}},
		Spec: corev1.ServiceSpec{Type: typ},
	}
	for p := range 10000 {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Protocol: corev1.ProtocolTCP, Port: int32(1 + p)})
	}
	return svc
}

// What one tenant writes into a Service must not cost every eipd its
// memory: a ClusterIP Service that names no IP, with a 250 KiB eip.io/junk
// annotation and 10,000 ports, adds under 1 KiB to eipd's Service cache,
// as it arrives from the API server (protobuf); an eip LoadBalancer
// Service with the same annotations keeps neither (the junk is not read,
// the sharing key is too long and refused), only its ports.
func TestCacheKeepsLittleOfAHostileService(t *testing.T) {
	codec := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	for _, c := range []struct {
		typ   corev1.ServiceType
		limit uint64
	}{{corev1.ServiceTypeClusterIP, 1 << 10}, {corev1.ServiceTypeLoadBalancer, 300 << 10}} {
		raw := encode(t, codec, hostileService("hostile", c.typ))
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexersFor(&corev1.Service{}))
		keep := newInterner().keepWhatIsRead
		before := heapInUse()
		obj, _, err := codec.Decode(raw, nil, nil)
		assert.NilError(t, err)
		kept, err := keep(obj)
		assert.NilError(t, err)
		assert.NilError(t, idx.Add(kept))
		obj = nil
		after := heapInUse()
		grew := after - min(after, before)
		assert.Assert(t, grew < c.limit, "%s: the cache grew by %d bytes", c.typ, grew)
		svc := kept.(*ipset.Service)
		assert.Equal(t, len(svc.Annotations), 0, "%s", c.typ)
		if c.typ == corev1.ServiceTypeLoadBalancer {
			assert.DeepEqual(t, svc.TooLong, []string{"eip.io/sharing-key"})
		}
		runtime.KeepAlive(idx)
	}
}
