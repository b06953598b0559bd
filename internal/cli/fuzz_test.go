package cli

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// seedLists are lists as the API server encodes them, and cut or damaged
// copies of them.
func seedLists(f *testing.F) [][]byte {
	leases := &coordinationv1.LeaseList{}
	for i := range 3 {
		leases.Items = append(leases.Items, *lock(fmt.Sprintf("198.18.100.%d", i+1), "node-1", int32(i), now, "default/svc"))
	}
	leases.Items = append(leases.Items, coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "eip-node-a", Namespace: "eip-system"}})
	svc := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{"eip.io/sharing-key": "k"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalIPs: []string{"198.18.100.9"}},
		Status:     corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.100.10"}}}},
	}
	var out [][]byte
	for _, b := range [][]byte{encode(f, leases), encode(f, &corev1.ServiceList{Items: []corev1.Service{svc}})} {
		out = append(out, b, b[:len(b)/2], append(bytes.Clone(b[:len(b)-3]), 0xff, 0xff, 0xff))
	}
	return out
}

// FuzzReadLeaseList: whatever the answer, readLeaseList returns an error
// or what it read, and never panics.
func FuzzReadLeaseList(f *testing.F) {
	for _, b := range seedLists(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		others, locks, err := readLeaseList(bytes.NewReader(b))
		if err != nil {
			return
		}
		for ip, lk := range locks {
			assert.Equal(t, lk.IP, ip)
		}
		for _, l := range others {
			assert.Assert(t, l != nil)
		}
	})
}

// FuzzReadServiceList: the same for Services, each claim naming its
// Service.
func FuzzReadServiceList(f *testing.F) {
	for _, b := range seedLists(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		claims, err := readServiceList(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, c := range claims {
			assert.Assert(t, c.Service != "" && c.IP != "", "%+v", c)
		}
	})
}

// A length is only a claim until the bytes come: an answer of a few bytes
// that claims an item of a gigabyte is refused without a gigabyte being
// allocated.
func TestReadItemsClaimingMoreThanSent(t *testing.T) {
	claim := func(field byte, n uint64) []byte { return binary.AppendUvarint([]byte{field<<3 | wireBytes}, n) }
	b := append(bytes.Clone(protobufMagic), claim(unknownRaw, 1<<30)...)
	b = append(b, claim(listItems, 1<<30-8)...)
	b = append(b, "short"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := readLeaseList(bytes.NewReader(b))
	runtime.ReadMemStats(&after)
	assert.ErrorContains(t, err, "unexpected EOF")
	assert.Assert(t, after.TotalAlloc-before.TotalAlloc < 1<<20, "allocated %d bytes", after.TotalAlloc-before.TotalAlloc)
}
