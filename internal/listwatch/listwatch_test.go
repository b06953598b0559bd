package listwatch_test

import (
	"context"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/eip-project/eip/internal/kubeclient/clientset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/listwatch"
)

func meta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
}

// Each ListWatch lists exactly what eip reads: every Service and Node, the
// Leases eip manages in its namespace and its one ConfigMap.
func TestForSelectsWhatEipReads(t *testing.T) {
	ours := map[string]string{lease.ManagedByLabel: lease.ManagedBy}
	c := fake.NewClientset(
		&corev1.Service{ObjectMeta: meta("a", "web", nil)},
		&corev1.Service{ObjectMeta: meta("b", "db", nil)},
		&corev1.Node{ObjectMeta: meta("", "node-1", nil)},
		&coordinationv1.Lease{ObjectMeta: meta("eip-system", "eip-node-node-1", ours)},
		&coordinationv1.Lease{ObjectMeta: meta("eip-system", "someone-elses", nil)},
		&coordinationv1.Lease{ObjectMeta: meta("other", "eip-node-node-2", ours)},
		&corev1.ConfigMap{ObjectMeta: meta("eip-system", "eip-config", nil)},
		&corev1.ConfigMap{ObjectMeta: meta("eip-system", "other-config", nil)},
	)
	// The fake filters on labels only: what it is asked for on fields is
	// checked from the request.
	var fieldSel []string
	c.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fieldSel = append(fieldSel, a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	c.PrependWatchReactor("configmaps", func(a k8stesting.Action) (bool, watch.Interface, error) {
		fieldSel = append(fieldSel, a.(k8stesting.WatchAction).GetWatchRestrictions().Fields.String())
		return false, nil, nil
	})
	set := listwatch.For(clientset.Adapt(c), "eip-system", "eip-config")
	names := func(lw *cache.ListWatch) []string {
		obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{})
		assert.NilError(t, err)
		items, err := metaItems(obj)
		assert.NilError(t, err)
		return items
	}
	assert.Check(t, is.DeepEqual(names(set.Services), []string{"a/web", "b/db"}))
	assert.Check(t, is.DeepEqual(names(set.Nodes), []string{"node-1"}))
	assert.Check(t, is.DeepEqual(names(set.Leases), []string{"eip-system/eip-node-node-1"}))
	assert.Check(t, is.Contains(names(set.ConfigMap), "eip-system/eip-config"))
	w, err := set.ConfigMap.WatchWithContext(context.Background(), metav1.ListOptions{})
	assert.NilError(t, err)
	w.Stop()
	assert.Check(t, is.DeepEqual(fieldSel, []string{"metadata.name=eip-config", "metadata.name=eip-config"}))
}

func metaItems(list runtime.Object) ([]string, error) {
	objs, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range objs {
		key, err := cache.MetaNamespaceKeyFunc(o)
		if err != nil {
			return nil, err
		}
		out = append(out, key)
	}
	return out, nil
}
