package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestManifestsApply renders the kustomize base with the built kubectl,
// validates it against the API server (strict field validation, server-side
// dry run), applies it for real and checks what the server stored. The
// cluster has no controller manager, so the DaemonSet creates no pods.
func TestManifestsApply(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	dir := c.opts.ManifestsDir
	k := c.Client()

	rendered, err := c.Kubectl(ctx, "kustomize", dir)
	assert.NilError(t, err)
	for _, want := range []string{"kind: Namespace", "kind: ServiceAccount", "kind: ClusterRole", "kind: Role",
		"kind: ConfigMap", "kind: DaemonSet", "image: ghcr.io/eip-project/eipd:"} {
		assert.Check(t, is.Contains(string(rendered), want))
	}

	out, err := c.Kubectl(ctx, "apply", "--dry-run=server", "--validate=strict", "-k", dir)
	assert.NilError(t, err)
	for _, want := range []string{"configmap/eip-config", "daemonset.apps/eipd", "clusterrole.rbac.authorization.k8s.io/eip", "role.rbac.authorization.k8s.io/eip"} {
		assert.Check(t, is.Contains(string(out), want+" "), "dry run output:\n%s", out)
	}
	assert.Check(t, is.Contains(string(out), "(server dry run)"))
	_, err = k.AppsV1().DaemonSets(Namespace).Get(ctx, "eipd", metav1.GetOptions{})
	assert.Assert(t, apierrors.IsNotFound(err), "a dry run created the DaemonSet: %v", err)

	// The namespace, ServiceAccount and RBAC were applied by Start and are
	// shared; remove only what this test adds.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = k.AppsV1().DaemonSets(Namespace).Delete(ctx, "eipd", metav1.DeleteOptions{})
		_ = k.CoreV1().ConfigMaps(Namespace).Delete(ctx, ConfigMap, metav1.DeleteOptions{})
		_ = k.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, ConfigMap, metav1.DeleteOptions{})
		_ = k.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, ConfigMap, metav1.DeleteOptions{})
	})
	out, err = c.Kubectl(ctx, "apply", "--server-side", "--field-manager=eip-manifests-test", "--validate=strict", "-k", dir)
	assert.NilError(t, err, "%s", out)

	ds, err := k.AppsV1().DaemonSets(Namespace).Get(ctx, "eipd", metav1.GetOptions{})
	assert.NilError(t, err)
	ctr := ds.Spec.Template.Spec.Containers[0]
	assert.Check(t, ds.Spec.Template.Spec.HostNetwork)
	assert.Check(t, is.DeepEqual(ctr.SecurityContext.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}))
	assert.Check(t, is.DeepEqual(ctr.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}))
	assert.Check(t, is.Equal(ds.Spec.Template.Spec.ServiceAccountName, ServiceAccount))

	b, err := os.ReadFile(filepath.Join(dir, "configmap.yaml"))
	assert.NilError(t, err)
	var want corev1.ConfigMap
	assert.NilError(t, yaml.Unmarshal(b, &want))
	cm, err := k.CoreV1().ConfigMaps(Namespace).Get(ctx, ConfigMap, metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, is.DeepEqual(cm.Data, want.Data))

	// Applying again changes nothing.
	out, err = c.Kubectl(ctx, "apply", "--server-side", "--field-manager=eip-manifests-test", "-k", dir)
	assert.NilError(t, err, "%s", out)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		assert.Check(t, strings.HasSuffix(line, " serverside-applied"), "%q", line)
	}
	again, err := k.AppsV1().DaemonSets(Namespace).Get(ctx, "eipd", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(again.Generation, ds.Generation), "re-applying the base changed the DaemonSet")

	// The liveness key ships empty; once an eipd filled it, applying the
	// base again, client-side as the docs say or server-side, keeps it.
	key, err := k.CoreV1().Secrets(Namespace).Get(ctx, "eip-liveness-key", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, is.Len(key.Data, 0))
	key.Data = map[string][]byte{"key": []byte("0123456789abcdef0123456789abcdef")}
	_, err = k.CoreV1().Secrets(Namespace).Update(ctx, key, metav1.UpdateOptions{})
	assert.NilError(t, err)
	t.Cleanup(func() {
		key.Data, key.ResourceVersion = nil, ""
		_, err := k.CoreV1().Secrets(Namespace).Update(context.Background(), key, metav1.UpdateOptions{})
		assert.Check(t, err)
	})
	for _, apply := range [][]string{{"apply", "-k", dir}, {"apply", "--server-side", "--field-manager=eip-manifests-test", "-k", dir}} {
		out, err = c.Kubectl(ctx, apply...)
		assert.NilError(t, err, "%s", out)
		kept, err := k.CoreV1().Secrets(Namespace).Get(ctx, "eip-liveness-key", metav1.GetOptions{})
		assert.NilError(t, err)
		assert.Check(t, is.DeepEqual(kept.Data, key.Data), "kubectl %s", strings.Join(apply, " "))
	}
}
