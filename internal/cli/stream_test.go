package cli

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// encode is obj as the API server sends it in protobuf.
func encode(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	assert.NilError(t, protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &b))
	return b.Bytes()
}

func managed() []metav1.ManagedFieldsEntry {
	return []metav1.ManagedFieldsEntry{{Manager: "eipd", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:holderIdentity":{}}}`)}}}
}

// Every item comes back as the typed decoder reads it, in order, without
// managedFields.
func TestReadItems(t *testing.T) {
	want := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "c"}}
	for i := range 300 {
		l := lock(fmt.Sprintf("198.18.100.%d", i%250+1), "node-1", int32(i), now.Add(-time.Minute), "default/svc")
		l.Name += fmt.Sprint("-", i)
		l.ManagedFields = managed()
		want.Items = append(want.Items, *l)
	}
	got, err := readItems[coordinationv1.Lease](bytes.NewReader(encode(t, want)))
	assert.NilError(t, err)
	assert.Equal(t, len(got), len(want.Items))
	for i := range got {
		w := want.Items[i].DeepCopy()
		w.ManagedFields = nil
		assert.DeepEqual(t, got[i], w)
	}

	svcs := &corev1.ServiceList{Items: []corev1.Service{*externalIPs("default", "a", "198.18.100.1"), *externalIPs("web", "b", "198.18.100.2", "2001:db8::100:2")}}
	svcs.Items[0].ManagedFields = managed()
	gotSvcs, err := readItems[corev1.Service](bytes.NewReader(encode(t, svcs)))
	assert.NilError(t, err)
	svcs.Items[0].ManagedFields = nil
	assert.DeepEqual(t, gotSvcs, []*corev1.Service{&svcs.Items[0], &svcs.Items[1]})

	empty, err := readItems[corev1.Service](bytes.NewReader(encode(t, &corev1.ServiceList{})))
	assert.NilError(t, err)
	assert.Equal(t, len(empty), 0)
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
		got, err := readItems[coordinationv1.Lease](bytes.NewReader(b[:n]))
		if err != nil {
			errs++
			continue
		}
		assert.Equal(t, len(got), len(list.Items), "cut at %d of %d bytes", n, len(b))
	}
	assert.Assert(t, errs >= len(b)-4, "%d of %d cuts refused", errs, len(b))
}

// JSON, or anything else, is refused rather than read as garbage.
func TestReadItemsNotProtobuf(t *testing.T) {
	_, err := readItems[corev1.Service](bytes.NewReader([]byte(`{"kind":"ServiceList","apiVersion":"v1","items":[]}`)))
	assert.ErrorContains(t, err, "not in protobuf")
	_, err = readItems[corev1.Service](io.LimitReader(bytes.NewReader(nil), 0))
	assert.ErrorContains(t, err, "not in protobuf")
}
