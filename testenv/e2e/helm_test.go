package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/eip-project/eip/internal/agent"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/testenv"
)

// tool returns a command that scripts/build-tool.sh built from
// testenv/tools/<name>; when it is not built (scripts/test.sh builds it
// before the suite) the test fails, or skips with testenv.SkipEnv=1.
func tool(t *testing.T, name, command string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	dir, err := testenv.ToolBinDir(root, name)
	assert.NilError(t, err)
	bin := filepath.Join(dir, command)
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv(testenv.SkipEnv) == "1" {
			t.Skipf("%s is not built (scripts/build-tool.sh %s): %v", command, name, err)
		}
		t.Fatalf("%s is not built: run scripts/build-tool.sh %s (or set %s=1 to skip): %v", command, name, testenv.SkipEnv, err)
	}
	return bin
}

// readmeLine returns the README's sh command that starts with prefix.
func readmeLine(t *testing.T, prefix string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	assert.NilError(t, err)
	for _, c := range shCommands(string(b)) {
		if strings.HasPrefix(c, prefix) {
			return c
		}
	}
	t.Fatalf("README.md shows no command starting with %q", prefix)
	return ""
}

// emptyCluster is a control plane of its own with nothing of eip left in it,
// for installing eip the way an operator does: the shared cluster already
// holds eip's objects, which Helm would refuse to take over.
type emptyCluster struct {
	*testenv.Cluster
	ctx  context.Context
	t    *testing.T
	home string // HELM_*_HOME
}

func newEmptyCluster(t *testing.T) *emptyCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	c, err := testenv.Start(ctx, testenv.Options{Nodes: 1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	assert.NilError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			c.Keep()
		}
		assert.Check(t, c.Close())
	})
	e := &emptyCluster{Cluster: c, ctx: ctx, t: t, home: t.TempDir()}
	e.removeEip()
	return e
}

// removeEip deletes what testenv applied of eip's (the namespace, its
// ServiceAccount, RBAC, liveness key, last good configuration and the
// Pods that stand for eipd), so that the cluster holds nothing of eip's.
func (c *emptyCluster) removeEip() {
	c.t.Helper()
	k, ctx, ns := c.Client(), c.ctx, testenv.Namespace
	// At once: no kubelet confirms a graceful deletion.
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	for _, n := range c.Nodes() {
		c.must(k.CoreV1().Pods(ns).Delete(ctx, testenv.DaemonPod(n.Name), now))
	}
	c.must(k.CoreV1().ServiceAccounts(ns).Delete(ctx, testenv.ServiceAccount, metav1.DeleteOptions{}))
	c.must(k.CoreV1().Secrets(ns).Delete(ctx, lanlive.KeySecret, metav1.DeleteOptions{}))
	c.must(k.CoreV1().ConfigMaps(ns).Delete(ctx, agent.LastGoodName(testenv.ConfigMap), metav1.DeleteOptions{}))
	c.must(k.RbacV1().Roles(ns).Delete(ctx, "eip", metav1.DeleteOptions{}))
	c.must(k.RbacV1().RoleBindings(ns).Delete(ctx, "eip", metav1.DeleteOptions{}))
	c.must(k.RbacV1().ClusterRoles().Delete(ctx, "eip", metav1.DeleteOptions{}))
	c.must(k.RbacV1().ClusterRoleBindings().Delete(ctx, "eip", metav1.DeleteOptions{}))
	c.must(k.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	c.finalizeNamespace()
}

func (c *emptyCluster) must(err error) {
	c.t.Helper()
	assert.NilError(c.t, err)
}

// finalizeNamespace does the namespace controller's last step for eip's
// deleted namespace, which this control plane (no controller manager)
// leaves Terminating: once nothing is left in it, it is removed. It
// fails the test if something is left in it.
func (c *emptyCluster) finalizeNamespace() {
	c.t.Helper()
	k := c.Client()
	ns, err := k.CoreV1().Namespaces().Get(c.ctx, testenv.Namespace, metav1.GetOptions{})
	if err == nil {
		assert.Assert(c.t, ns.DeletionTimestamp != nil, "namespace %s was not deleted", testenv.Namespace)
		for _, o := range c.objects() {
			assert.Check(c.t, !strings.Contains(o, " "+testenv.Namespace+"/"), "%s is left in the deleted namespace", o)
		}
		ns.Spec.Finalizers = nil
		_, err = k.CoreV1().Namespaces().Finalize(c.ctx, ns, metav1.UpdateOptions{})
		c.must(err)
		_, err = k.CoreV1().Namespaces().Get(c.ctx, testenv.Namespace, metav1.GetOptions{})
	}
	assert.Check(c.t, apierrors.IsNotFound(err), "namespace %s: %v", testenv.Namespace, err)
}

// sh runs a command line with bash from the cluster's client namespace, in
// the repository root, with kubectl and helm on PATH and KUBECONFIG naming
// the cluster's admin kubeconfig. That kubeconfig's context names
// eip-system as its namespace, where an operator's usually names default:
// HELM_NAMESPACE=default keeps Helm's release records where an operator's
// would be.
func (c *emptyCluster) sh(line string) string {
	c.t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(c.t, err)
	path := filepath.Dir(tool(c.t, "helm", "helm")) + ":" + filepath.Dir(c.KubectlPath()) + ":/usr/local/bin:/usr/bin:/bin"
	out, err := c.Exec(c.ctx, testenv.Client, "env", "PATH="+path, "KUBECONFIG="+c.AdminKubeconfig(),
		"HELM_NAMESPACE=default", "HELM_CACHE_HOME="+c.home+"/cache", "HELM_CONFIG_HOME="+c.home+"/config", "HELM_DATA_HOME="+c.home+"/data",
		"bash", "-o", "pipefail", "-c", "cd "+root+" && "+line+" 2>&1")
	assert.NilError(c.t, err, "%s:\n%s", line, out)
	c.t.Logf("$ %s\n%s", line, out)
	return string(out)
}

// objects names every object the API server lists, as "resource
// namespace/name", Events and Leases aside: the control plane writes those
// by itself.
func (c *emptyCluster) objects() []string {
	c.t.Helper()
	cfg := c.AdminConfig()
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	assert.NilError(c.t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	assert.NilError(c.t, err)
	lists, err := disc.ServerPreferredResources()
	assert.NilError(c.t, err)
	var names []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		assert.NilError(c.t, err)
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || r.Name == "events" || r.Name == "leases" {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(c.ctx, metav1.ListOptions{})
			assert.NilError(c.t, err, r.Name)
			for _, o := range items.Items {
				names = append(names, fmt.Sprintf("%s %s/%s", r.Name, o.GetNamespace(), o.GetName()))
			}
		}
	}
	slices.Sort(names)
	return names
}

// TestHelmInstallUpgradeUninstall runs the README's `helm install` line of a
// build from source (the chart in charts/eip) as
// written against an empty cluster, upgrades the release with other values,
// and uninstalls it: every object it made is gone again.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	t.Parallel()
	install := readmeLine(t, "helm install eip charts/eip ")
	c := newEmptyCluster(t)
	k := c.Client()
	// The Prometheus Operator's kinds, so that the upgrade can turn the
	// ServiceMonitor and PrometheusRule on.
	c.must(c.Apply(c.ctx, []byte(operatorCRDs)))
	c.sh("kubectl wait --for=condition=established --timeout=60s crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com")
	before := c.objects()

	c.sh(install)
	cm, err := k.CoreV1().ConfigMaps(testenv.Namespace).Get(c.ctx, testenv.ConfigMap, metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(cm.Data["ranges"], "192.0.2.240/28 auto-assign"))
	assert.Check(t, is.Equal(cm.Data["lease-duration"], "2s"))
	ds, err := k.AppsV1().DaemonSets(testenv.Namespace).Get(c.ctx, "eipd", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(ds.Spec.Template.Spec.Containers[0].Image, "REGISTRY/eipd:TAG"))
	assert.Check(t, is.Equal(ds.Annotations["meta.helm.sh/release-name"], "eip"), "Helm owns the DaemonSet")
	for _, want := range []string{
		"namespaces /eip-system", "serviceaccounts eip-system/eip", "configmaps eip-system/eip-config",
		"daemonsets eip-system/eipd", "roles eip-system/eip", "rolebindings eip-system/eip",
		"clusterroles /eip", "clusterrolebindings /eip",
		"clusterroles /eip-view", "clusterroles /eip-operator", "secrets eip-system/eip-liveness-key",
	} {
		assert.Check(t, slices.Contains(c.objects(), want), "%s was not created", want)
	}

	c.sh("helm upgrade eip charts/eip --reuse-values --set config.lease-duration=3s --set config.renew-interval=1s --set image.tag=v0.2.0 --set daemonset.priorityClassName=system-cluster-critical --set serviceMonitor.enabled=true,prometheusRule.enabled=true")
	cm, err = k.CoreV1().ConfigMaps(testenv.Namespace).Get(c.ctx, testenv.ConfigMap, metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(cm.Data["lease-duration"], "3s"))
	assert.Check(t, is.Equal(cm.Data["renew-interval"], "1s"))
	assert.Check(t, is.Equal(cm.Data["ranges"], "192.0.2.240/28 auto-assign"), "--reuse-values kept the ranges")
	ds, err = k.AppsV1().DaemonSets(testenv.Namespace).Get(c.ctx, "eipd", metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(ds.Spec.Template.Spec.Containers[0].Image, "REGISTRY/eipd:v0.2.0"))
	assert.Check(t, is.Equal(ds.Spec.Template.Spec.PriorityClassName, "system-cluster-critical"))
	for _, want := range []string{"services eip-system/eipd-metrics", "servicemonitors eip-system/eipd", "prometheusrules eip-system/eip"} {
		assert.Check(t, slices.Contains(c.objects(), want), "%s was not created", want)
	}
	history := c.sh("helm history eip")
	assert.Check(t, is.Contains(history, "Install complete"))
	assert.Check(t, is.Contains(history, "Upgrade complete"))

	c.sh("helm uninstall eip")
	// Helm deleted the namespace with the rest; the namespace controller's
	// part is done by hand.
	c.finalizeNamespace()
	// Helm's release records (Secrets in the default namespace) included.
	assert.DeepEqual(t, c.objects(), before)
}

// operatorCRDs stand in for the Prometheus Operator's definitions of
// ServiceMonitor and PrometheusRule: the same names, no schema.
const operatorCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: prometheusrules.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, listKind: PrometheusRuleList, plural: prometheusrules, singular: prometheusrule}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
