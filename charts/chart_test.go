package charts

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/testenv"
)

// tool returns the path of a command that scripts/build-tool.sh built from
// testenv/tools/<name>; the test is skipped, saying how to build it, when
// it has not been built (scripts/test.sh builds it before the tests).
func tool(t *testing.T, name, command string) string {
	t.Helper()
	dir, err := testenv.ToolBinDir(repoRoot(t), name)
	assert.NilError(t, err)
	bin := filepath.Join(dir, command)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s is not built (scripts/build-tool.sh %s): %v", command, name, err)
	}
	return bin
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	return root
}

// helm runs the real helm with args in the repository root, with its
// cache, configuration and data in a temporary directory, and returns its
// standard output; it fails the test with standard error when helm fails.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runHelm(t, args...)
	assert.NilError(t, err)
	return out
}

func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(tool(t, "helm", "helm"), args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// object is one rendered Kubernetes object, as plain data.
type object = testenv.Rendered

// objects decodes a YAML stream into its objects, keyed by kind, namespace
// and name; a key seen twice fails the test.
func objects(t *testing.T, stream string) map[string]object {
	t.Helper()
	out, err := testenv.DecodeRendered(stream)
	assert.NilError(t, err)
	return out
}

// one decodes the rendered object with the given key into a typed value.
func one[T any](t *testing.T, objs map[string]object, key string) T {
	t.Helper()
	var v T
	o, ok := objs[key]
	assert.Assert(t, ok, "no %s in %v", key, keys(objs))
	b, err := yaml.Marshal(o)
	assert.NilError(t, err)
	assert.NilError(t, yaml.UnmarshalStrict(b, &v), key)
	return v
}

func keys(objs map[string]object) []string { return slices.Sorted(maps.Keys(objs)) }

// kustomize renders the kustomization in manifests/dir.
func kustomize(t *testing.T, dir string) string {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(t), "manifests", dir))
	assert.NilError(t, err)
	b, err := res.AsYaml()
	assert.NilError(t, err)
	return string(b)
}

func TestChartLints(t *testing.T) {
	out := helm(t, "lint", "--strict", "charts/eip")
	assert.Check(t, is.Contains(out, "1 chart(s) linted, 0 chart(s) failed"), out)
	out = helm(t, "lint", "--strict", "charts/eip", "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true")
	assert.Check(t, is.Contains(out, "1 chart(s) linted, 0 chart(s) failed"), out)
}

// With default values the chart renders the kustomize base, object for
// object and field for field.
func TestChartRendersTheManifests(t *testing.T) {
	chart := objects(t, helm(t, "template", "eip", "charts/eip"))
	base := objects(t, kustomize(t, ""))
	assert.Equal(t, len(base), 21, "%v", keys(base))
	assert.DeepEqual(t, chart, base) // on a difference, make charts/eip follow manifests/

	// Installed into eip's own namespace (helm install -n eip-system
	// --create-namespace), the chart leaves the Namespace to Helm.
	inNS := objects(t, helm(t, "template", "eip", "charts/eip", "--namespace", "eip-system"))
	delete(base, "Namespace <nil>/eip-system")
	assert.DeepEqual(t, inNS, base)
}

// The admission policies of manifests/admission are on by default, as in
// the base; admission.enabled=false leaves them out; the values reach the
// policies' parameters and the ServiceAccount they bind; the CIDRs default
// to those of config.ranges.
func TestChartAdmission(t *testing.T) {
	chart := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "admission.enabled=false"))
	base := objects(t, kustomize(t, ""))
	admission := objects(t, kustomize(t, "admission"))
	assert.Equal(t, len(admission), 5, "%v", keys(admission))
	for k := range admission {
		_, kept := chart[k]
		assert.Check(t, !kept, "admission.enabled=false renders %s", k)
		delete(base, k)
	}
	assert.DeepEqual(t, chart, base) // on a difference, make charts/eip follow manifests/

	chart = objects(t, helm(t, "template", "eip", "charts/eip", "--set", "namespace.name=edge-ips",
		"--set", "admission.externalIPs=off", "--set-string", "admission.externalIPNamespaces=team-a\\,team-b", "--set", "admission.cidrs=192.0.2.0/28"))
	params := chart["ConfigMap edge-ips/eip-admission"]["data"]
	assert.DeepEqual(t, params, map[string]any{"external-ips": "off", "external-ip-namespaces": "team-a,team-b", "cidrs": "192.0.2.0/28", "max-external-ips": "64"})
	b, err := yaml.Marshal(chart["ValidatingAdmissionPolicy <nil>/eip-status"])
	assert.NilError(t, err)
	assert.Check(t, is.Contains(string(b), "system:serviceaccount:edge-ips:eip"))
	for _, kind := range []string{"ValidatingAdmissionPolicyBinding <nil>/eip-status", "ValidatingAdmissionPolicyBinding <nil>/eip-services"} {
		ref := chart[kind]["spec"].(map[string]any)["paramRef"].(map[string]any)
		assert.Check(t, is.Equal(ref["namespace"], "edge-ips"), kind)
	}

	chart = objects(t, helm(t, "template", "eip", "charts/eip", "--set-string",
		"config.ranges=# pools\n192.0.2.240/28 auto-assign\n\t198.51.100.7 name=one # a single address\n2001:db8:1::/120"))
	params = chart["ConfigMap eip-system/eip-admission"]["data"]
	assert.DeepEqual(t, params.(map[string]any)["cidrs"], "192.0.2.240/28, 198.51.100.7/32, 2001:db8:1::/120")
	_, err = runHelm(t, "template", "eip", "charts/eip", "--set-string", "config.ranges=192.0.2.10-192.0.2.20")
	assert.Check(t, is.ErrorContains(err, "admission.cidrs: config.ranges has the span 192.0.2.10-192.0.2.20"))
}

// Every value the chart offers shows in what it renders.
func TestChartValues(t *testing.T) {
	objs := objects(t, helm(t, "template", "eip", "charts/eip",
		"--set", "namespace.name=edge-ips",
		"--set", "image.repository=registry.example/eipd,image.tag=v9.8.7,image.pullPolicy=Always",
		"--set", "config.policy=spread,config.lease-duration=4s,config.renew-interval=1s,config.api-loss=fence",
		"--set-string", "config.ranges=198.18.100.0/28 name=pool auto-assign",
		"--set-string", "daemonset.nodeSelector.eip-edge=true",
		"--set", "daemonset.tolerations[0].key=edge,daemonset.tolerations[0].operator=Exists",
		"--set", "daemonset.resources.requests.cpu=200m,daemonset.resources.limits.memory=256Mi",
		"--set", "daemonset.priorityClassName=eip-critical,daemonset.goMemLimit=90MiB,daemonset.goMaxProcs=2",
		"--set", "metrics.port=9500",
		"--set", "serviceMonitor.enabled=true,serviceMonitor.interval=30s,serviceMonitor.labels.release=prom",
		"--set", "prometheusRule.enabled=true,prometheusRule.labels.release=prom",
	))

	ds := one[appsv1.DaemonSet](t, objs, "DaemonSet edge-ips/eipd")
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	assert.Check(t, is.Equal(c.Image, "registry.example/eipd:v9.8.7"))
	assert.Check(t, is.Equal(c.ImagePullPolicy, corev1.PullAlways))
	assert.Check(t, is.DeepEqual(c.Args, []string{"--metrics-addr=:9500"}))
	assert.Check(t, is.Equal(c.Ports[0].ContainerPort, int32(9500)))
	assert.Check(t, is.Equal(ds.Spec.Template.Annotations["prometheus.io/port"], "9500"))
	assert.Check(t, is.DeepEqual(pod.NodeSelector, map[string]string{"kubernetes.io/os": "linux", "eip-edge": "true"}))
	assert.Check(t, is.DeepEqual(pod.Tolerations, []corev1.Toleration{{Key: "edge", Operator: corev1.TolerationOpExists}}))
	assert.Check(t, c.Resources.Requests.Cpu().Equal(resource.MustParse("200m")), "%v", c.Resources)
	assert.Check(t, c.Resources.Limits.Memory().Equal(resource.MustParse("256Mi")), "%v", c.Resources)
	assert.Check(t, is.Equal(pod.PriorityClassName, "eip-critical"))
	assert.Check(t, slices.Contains(c.Env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: "90MiB"}), "%v", c.Env)
	assert.Check(t, slices.Contains(c.Env, corev1.EnvVar{Name: "GOMAXPROCS", Value: "2"}), "%v", c.Env)

	cm := one[corev1.ConfigMap](t, objs, "ConfigMap edge-ips/eip-config")
	cfg, err := config.Parse(cm.Data)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(cfg.Policy, config.PolicySpread))
	assert.Check(t, is.Equal(cfg.LeaseDuration, 4*time.Second))
	assert.Check(t, is.Equal(cfg.RenewInterval, time.Second))
	assert.Check(t, is.Equal(cfg.APILoss, config.APILossFence))
	assert.Check(t, is.Len(cfg.Ranges, 1))

	svc := one[corev1.Service](t, objs, "Service edge-ips/eipd-metrics")
	assert.Check(t, is.Equal(svc.Spec.ClusterIP, corev1.ClusterIPNone))
	assert.Check(t, is.Equal(svc.Spec.Ports[0].Port, int32(9500)))
	assert.Check(t, is.DeepEqual(svc.Spec.Selector, ds.Spec.Selector.MatchLabels))
	sm := objs["ServiceMonitor edge-ips/eipd"]
	assert.Check(t, is.Equal(testenv.Path(sm, "metadata", "labels", "release"), "prom"))
	assert.Check(t, is.Equal(testenv.Path(sm, "spec", "endpoints", 0, "interval"), "30s"))
	assert.Check(t, is.Equal(testenv.Path(sm, "spec", "endpoints", 0, "port"), "metrics"))
	assert.Check(t, is.DeepEqual(testenv.Path(sm, "spec", "namespaceSelector", "matchNames"), []any{"edge-ips"}))
	rule := objs["PrometheusRule edge-ips/eip"]
	assert.Check(t, is.Equal(testenv.Path(rule, "metadata", "labels", "release"), "prom"))
	assert.Check(t, is.Equal(testenv.Path(rule, "spec", "groups", 0, "rules", 0, "alert"), "EipIPUnbound"))
	assert.Check(t, is.Equal(testenv.Path(rule, "spec", "groups", 0, "rules", 0, "for"), "9s"), "4s lease + 5s")
	for _, k := range []string{"Namespace <nil>/edge-ips", "ServiceAccount edge-ips/eip", "Role edge-ips/eip", "RoleBinding edge-ips/eip"} {
		_, ok := objs[k]
		assert.Check(t, ok, "no %s", k)
	}
	assert.Check(t, is.Equal(testenv.Path(objs["ClusterRoleBinding <nil>/eip"], "subjects", 0, "namespace"), "edge-ips"))
	assert.Check(t, is.Equal(testenv.Path(objs["ValidatingAdmissionPolicy <nil>/eip-config"], "spec", "matchConditions", 0, "expression"),
		"request.namespace == 'edge-ips' && object.metadata.name == 'eip-config'"))

	// configPolicy.enabled=false leaves the policy and its binding out, and nothing else.
	off := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "configPolicy.enabled=false"))
	on := objects(t, helm(t, "template", "eip", "charts/eip"))
	delete(on, "ValidatingAdmissionPolicy <nil>/eip-config")
	delete(on, "ValidatingAdmissionPolicyBinding <nil>/eip-config")
	assert.Check(t, is.DeepEqual(off, on))
}

// EipIPUnbound waits the lease duration + 5 s, whatever unit the lease
// duration is in, and a lease duration the chart cannot add to is an error
// that says what to set.
func TestChartUnboundFor(t *testing.T) {
	for lease, want := range map[string]string{"2s": "7s", "1500ms": "6500ms", "10s": "15s"} {
		objs := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "prometheusRule.enabled=true", "--set", "config.lease-duration="+lease))
		assert.Check(t, is.Equal(testenv.Path(objs["PrometheusRule eip-system/eip"], "spec", "groups", 0, "rules", 0, "for"), want), lease)
	}
	objs := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "prometheusRule.enabled=true,prometheusRule.unboundFor=1m"))
	assert.Check(t, is.Equal(testenv.Path(objs["PrometheusRule eip-system/eip"], "spec", "groups", 0, "rules", 0, "for"), "1m"))
	_, err := runHelm(t, "template", "eip", "charts/eip", "--set", "prometheusRule.enabled=true", "--set", "config.lease-duration=1m")
	assert.ErrorContains(t, err, `cannot add 5s to config.lease-duration "1m"; set prometheusRule.unboundFor`)
}

// eipd's Role may write every Lease in eip's namespace (its locks are
// created under names it chooses). In kube-system Leases elect the control
// plane's leaders, and default is everyone's: the chart refuses both.
func TestChartRefusesSharedNamespaces(t *testing.T) {
	for _, ns := range []string{"kube-system", "default"} {
		_, err := runHelm(t, "template", "eip", "charts/eip", "--set", "namespace.name="+ns)
		assert.Check(t, is.ErrorContains(err, `namespace.name: eip cannot share namespace "`+ns+`"`), ns)
	}
}

// The liveness port the DaemonSet declares is the ConfigMap's.
func TestChartLivenessPort(t *testing.T) {
	livenessPorts := func(args ...string) []corev1.ContainerPort {
		t.Helper()
		objs := objects(t, helm(t, append([]string{"template", "eip", "charts/eip"}, args...)...))
		ds := one[appsv1.DaemonSet](t, objs, "DaemonSet eip-system/eipd")
		return slices.DeleteFunc(ds.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name != "liveness" })
	}
	udp := func(port int32) []corev1.ContainerPort {
		return []corev1.ContainerPort{{Name: "liveness", ContainerPort: port, Protocol: corev1.ProtocolUDP}}
	}
	assert.Check(t, is.DeepEqual(livenessPorts(), udp(9403)))
	assert.Check(t, is.DeepEqual(livenessPorts("--set", "config.liveness-port=9500"), udp(9500)))
	assert.Check(t, is.DeepEqual(livenessPorts("--set-string", "config.liveness-port=9501"), udp(9501)))
	assert.Check(t, is.DeepEqual(livenessPorts("--set-string", "config.liveness-port="), udp(9403)), "empty means the default")
	assert.Check(t, is.Len(livenessPorts("--set-string", "config.liveness-port=off"), 0))
	assert.Check(t, is.Len(livenessPorts("--set", "config.liveness-port=0"), 0))
	_, err := runHelm(t, "template", "eip", "charts/eip", "--set-string", "config.liveness-port=80")
	assert.Check(t, is.ErrorContains(err, `config.liveness-port: "80" is not a port from 1024 to 65535, nor "off"`))
}
