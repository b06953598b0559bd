package kubeclient_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"github.com/eip-project/eip/internal/kubeclient"
)

// TestRequestsReachTheirGroup: each kind goes to its group's path, list
// options become query parameters, and protobuf is asked for and decoded.
func TestRequestsReachTheirGroup(t *testing.T) {
	s, err := kubeclient.NewScheme()
	assert.NilError(t, err)
	proto, ok := runtime.SerializerInfoForMediaType(serializer.NewCodecFactory(s).SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	assert.Assert(t, ok)
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+r.Header.Get("Accept"))
		var obj runtime.Object = &coordinationv1.LeaseList{Items: []coordinationv1.Lease{{ObjectMeta: metav1.ObjectMeta{Name: "l1"}}}}
		gv := coordinationv1.SchemeGroupVersion
		if r.URL.Path == "/api/v1/nodes/n1" {
			obj, gv = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, corev1.SchemeGroupVersion
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		assert.NilError(t, serializer.NewCodecFactory(s).EncoderForVersion(proto.Serializer, gv).Encode(obj, w))
	}))
	defer srv.Close()

	c, err := kubeclient.NewForConfig(&rest.Config{Host: srv.URL, QPS: 10, Burst: 10})
	assert.NilError(t, err)
	leases, err := c.Leases("eip-system").List(t.Context(), metav1.ListOptions{LabelSelector: "a=b"})
	assert.NilError(t, err)
	assert.Equal(t, leases.Items[0].Name, "l1")
	node, err := c.Nodes().Get(t.Context(), "n1", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Equal(t, node.Name, "n1")
	const accept = "application/vnd.kubernetes.protobuf,application/json"
	assert.DeepEqual(t, got, []string{
		"GET /apis/coordination.k8s.io/v1/namespaces/eip-system/leases?labelSelector=a%3Db " + accept,
		"GET /api/v1/nodes/n1? " + accept,
	})
}
