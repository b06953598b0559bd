package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"github.com/eip-project/eip/internal/agent"
	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
)

const (
	namespace      = "eip-system"
	serviceAccount = "eip"
	image          = "ghcr.io/eip-project/eipd"
	metricsPort    = 9402
	configMap      = "eip-config"
)

// kustomization is the part of kustomization.yaml this base uses; decoding
// is strict, so a field outside it fails the test rather than being ignored.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// readKustomization reads the kustomization.yaml of dir.
func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	assert.NilError(t, err)
	var k kustomization
	assert.NilError(t, yaml.UnmarshalStrict(b, &k))
	return k
}

// decodeAll strictly decodes every document of every resource in the
// kustomization of dir into typed objects: a misspelt field fails here, as
// it would on `kubectl apply --validate=strict`.
func decodeAll(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	for _, file := range readKustomization(t, dir).Resources {
		if fi, err := os.Stat(filepath.Join(dir, file)); err == nil && fi.IsDir() {
			objs = append(objs, decodeAll(t, filepath.Join(dir, file))...)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		assert.NilError(t, err)
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			assert.NilError(t, err, file)
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := strict.Decode(doc, nil, nil)
			assert.NilError(t, err, file)
			objs = append(objs, obj)
		}
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

func only[T runtime.Object](t *testing.T, objs []runtime.Object) []T {
	t.Helper()
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func one[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	all := only[T](t, objs)
	assert.Equal(t, len(all), 1, "want exactly one %T", *new(T))
	return all[0]
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t, ".")
	assert.Equal(t, k.APIVersion, "kustomize.config.k8s.io/v1beta1")
	assert.Equal(t, k.Kind, "Kustomization")
	files, err := filepath.Glob("*.yaml")
	assert.NilError(t, err)
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	// The admission policies, on by default, are a base of their own.
	files = append(files, "admission")
	slices.Sort(files)
	listed := slices.Sorted(slices.Values(k.Resources))
	assert.DeepEqual(t, listed, files)

	// The image make image names, once, at the release of the VERSION
	// file, which the chart installs too.
	assert.Equal(t, len(k.Images), 1)
	assert.Equal(t, k.Images[0].Name, image)
	b, err := os.ReadFile("../VERSION")
	assert.NilError(t, err)
	version := strings.TrimSpace(string(b))
	assert.Check(t, is.Equal(k.Images[0].NewTag, version), "manifests/kustomization.yaml names another release than VERSION")
	b, err = os.ReadFile("../charts/eip/Chart.yaml")
	assert.NilError(t, err)
	var chart struct{ Version, AppVersion string }
	assert.NilError(t, yaml.Unmarshal(b, &chart))
	assert.Check(t, is.Equal(chart.AppVersion, version), "charts/eip/Chart.yaml's appVersion is not VERSION")
	assert.Check(t, is.Equal("v"+chart.Version, version), "charts/eip/Chart.yaml's version is not VERSION")
}

func TestEveryObjectIsEips(t *testing.T) {
	objs := decodeAll(t, ".")
	kinds := map[string]int{}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		kinds[kind]++
		m, ok := o.(interface {
			GetNamespace() string
			GetName() string
			GetLabels() map[string]string
		})
		assert.Assert(t, ok, "%T", o)
		assert.Check(t, is.Equal(m.GetLabels()["app.kubernetes.io/part-of"], "eip"), kind)
		switch {
		case kind == "Namespace", kind == "ClusterRole", kind == "ClusterRoleBinding",
			kind == "ValidatingAdmissionPolicy", kind == "ValidatingAdmissionPolicyBinding":
			assert.Check(t, is.Equal(m.GetNamespace(), ""), kind)
		default:
			assert.Check(t, is.Equal(m.GetNamespace(), namespace), kind)
		}
	}
	assert.DeepEqual(t, kinds, map[string]int{
		"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 1,
		"Role": 1, "RoleBinding": 1, "ConfigMap": 3, "DaemonSet": 1, "Secret": 1,
		"ValidatingAdmissionPolicy": 4, "ValidatingAdmissionPolicyBinding": 4,
	})
	assert.Equal(t, one[*corev1.Namespace](t, objs).Name, namespace)
	assert.Equal(t, one[*corev1.ServiceAccount](t, objs).Name, serviceAccount)
}

// The liveness key ships empty, for the first eipd to fill: applying the
// manifests again sets no data, so it keeps the key.
func TestLivenessKeyShipsEmpty(t *testing.T) {
	s := one[*corev1.Secret](t, decodeAll(t, "."))
	assert.Equal(t, s.Name, lanlive.KeySecret)
	assert.Equal(t, s.Type, corev1.SecretTypeOpaque)
	assert.Check(t, is.Len(s.Data, 0))
	assert.Check(t, is.Len(s.StringData, 0))
}

// named returns the object of type T with that namespace and name.
func named[T interface {
	runtime.Object
	GetNamespace() string
	GetName() string
}](t *testing.T, objs []runtime.Object, ns, name string) T {
	t.Helper()
	for _, o := range only[T](t, objs) {
		if o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %T %s/%s", *new(T), ns, name)
	return *new(T)
}

func TestRBACIsMinimal(t *testing.T) {
	objs := decodeAll(t, ".")
	read := []string{"list", "watch"}
	cr := named[*rbacv1.ClusterRole](t, objs, "", "eip")
	assert.DeepEqual(t, cr.Rules, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
	})
	role := named[*rbacv1.Role](t, objs, namespace, "eip")
	assert.DeepEqual(t, role.Rules, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{configMap}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{agent.LastGoodName(configMap)}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{lanlive.KeySecret}, Verbs: []string{"get", "watch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{bgp.ShippedPasswordSecret}, Verbs: []string{"get"}},
	})

	sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}}
	crb := one[*rbacv1.ClusterRoleBinding](t, objs)
	assert.DeepEqual(t, crb.RoleRef, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name})
	assert.DeepEqual(t, crb.Subjects, sa)
	rb := named[*rbacv1.RoleBinding](t, objs, namespace, "eip")
	assert.DeepEqual(t, rb.RoleRef, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "eip"})
	assert.DeepEqual(t, rb.Subjects, sa)
}

// The plugin's roles: eip-view reads what status reads and writes nothing;
// eip-operator adds the lock updates and watches of move, meant to be bound
// in eip's namespace only. testenv/e2e runs the plugin as users bound to
// them.
func TestPluginRoles(t *testing.T) {
	objs := decodeAll(t, ".")
	read := []string{"list", "watch"}
	assert.DeepEqual(t, named[*rbacv1.ClusterRole](t, objs, "", "eip-view").Rules, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{configMap}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: read},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
	})
	assert.DeepEqual(t, named[*rbacv1.ClusterRole](t, objs, "", "eip-operator").Rules, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "watch", "update"}},
	})
}

func TestConfigMapShipsTheDefaults(t *testing.T) {
	cm := named[*corev1.ConfigMap](t, decodeAll(t, "."), namespace, configMap)
	assert.DeepEqual(t, slices.Sorted(func(yield func(string) bool) {
		for k := range cm.Data {
			if !yield(k) {
				return
			}
		}
	}), slices.Sorted(slices.Values(config.Keys())))

	c, err := config.Parse(cm.Data)
	assert.NilError(t, err)
	assert.Check(t, is.Len(c.Warnings, 0), "%q", c.Warnings)
	assert.Check(t, c.Equal(config.Default()), "the shipped values are not the defaults: %+v", c)
}

// Every key carries a comment on the line above it, for people who read the
// file before applying it.
func TestConfigMapKeysAreCommented(t *testing.T) {
	b, err := os.ReadFile("configmap.yaml")
	assert.NilError(t, err)
	lines := strings.Split(string(b), "\n")
	for _, key := range config.Keys() {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  "+key+":") })
		assert.Assert(t, i > 0, "key %s not found at the top level of data", key)
		assert.Check(t, strings.HasPrefix(strings.TrimSpace(lines[i-1]), "# "), "key %s has no comment above it", key)
	}
}

func TestDaemonSet(t *testing.T) {
	objs := decodeAll(t, ".")
	ds := one[*appsv1.DaemonSet](t, objs)
	spec := ds.Spec.Template.Spec

	for k, v := range ds.Spec.Selector.MatchLabels {
		assert.Check(t, is.Equal(ds.Spec.Template.Labels[k], v), "selector label %s", k)
	}
	assert.Equal(t, ds.Spec.UpdateStrategy.Type, appsv1.RollingUpdateDaemonSetStrategyType)
	assert.DeepEqual(t, ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable, ptr(intstr.FromInt32(1)))

	assert.Check(t, spec.HostNetwork)
	assert.Check(t, is.Equal(spec.ServiceAccountName, one[*corev1.ServiceAccount](t, objs).Name))
	assert.Check(t, is.Equal(spec.PriorityClassName, "system-node-critical"))
	assert.Check(t, is.DeepEqual(spec.TerminationGracePeriodSeconds, ptr(int64(30))))
	assert.Check(t, is.DeepEqual(spec.NodeSelector, map[string]string{"kubernetes.io/os": "linux"}))
	assert.Check(t, slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "node-role.kubernetes.io/control-plane" && tol.Operator == corev1.TolerationOpExists
	}), "control-plane nodes are not tolerated")

	assert.Equal(t, len(spec.Containers), 1)
	assert.Equal(t, len(spec.InitContainers), 0)
	c := spec.Containers[0]
	assert.Check(t, strings.HasPrefix(c.Image, image+":"), c.Image)

	sc := c.SecurityContext
	assert.Assert(t, sc != nil && sc.Capabilities != nil)
	assert.DeepEqual(t, sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"})
	assert.DeepEqual(t, sc.Capabilities.Drop, []corev1.Capability{"ALL"})
	assert.DeepEqual(t, sc.Privileged, ptr(false))
	assert.DeepEqual(t, sc.AllowPrivilegeEscalation, ptr(false))
	assert.DeepEqual(t, sc.ReadOnlyRootFilesystem, ptr(true))
	assert.Check(t, spec.SecurityContext.SeccompProfile != nil && spec.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
	assert.Check(t, !spec.HostPID && !spec.HostIPC)
	// One volume: the host's /dev/net/tun, for the device eipd's
	// addresses live on; nothing else of the host.
	charDev := corev1.HostPathCharDev
	assert.DeepEqual(t, spec.Volumes, []corev1.Volume{{Name: "dev-net-tun", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: "/dev/net/tun", Type: &charDev}}}})
	assert.DeepEqual(t, c.VolumeMounts, []corev1.VolumeMount{{Name: "dev-net-tun", MountPath: "/dev/net/tun"}})

	env := map[string]string{}
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			// The Go runtime's own syntax (MiB, not Mi), and room
			// under the container's limit for what is not Go's: the
			// binary's pages count against it too.
			v, ok := strings.CutSuffix(e.Value, "B")
			q, err := resource.ParseQuantity(v)
			assert.Assert(t, ok && err == nil && strings.HasSuffix(v, "i"), "GOMEMLIMIT %q", e.Value)
			q.Add(resource.MustParse("32Mi"))
			assert.Check(t, q.Cmp(*c.Resources.Limits.Memory()) <= 0, "GOMEMLIMIT %s leaves less than 32Mi under the limit %s", e.Value, c.Resources.Limits.Memory())
			continue
		}
		if e.Name == "GOMAXPROCS" {
			n, err := strconv.Atoi(e.Value)
			assert.Check(t, err == nil && n > 0, "GOMAXPROCS %q", e.Value)
			continue
		}
		assert.Assert(t, e.ValueFrom != nil && e.ValueFrom.FieldRef != nil, "env %s", e.Name)
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	assert.DeepEqual(t, env, map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAMESPACE": "metadata.namespace", "NODE_IP": "status.hostIP"})

	// The liveness port is the default of liveness-port, which the
	// ConfigMap leaves as it is.
	assert.DeepEqual(t, c.Ports, []corev1.ContainerPort{
		{Name: "metrics", ContainerPort: metricsPort, Protocol: corev1.ProtocolTCP},
		{Name: "liveness", ContainerPort: config.DefaultLivenessPort, Protocol: corev1.ProtocolUDP},
	})
	assert.Check(t, slices.Contains(c.Args, "--metrics-addr=:9402"), "%q", c.Args)
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		assert.Assert(t, probe != nil && probe.HTTPGet != nil, path)
		assert.Check(t, is.Equal(probe.HTTPGet.Path, path))
		assert.Check(t, is.Equal(probe.HTTPGet.Port, intstr.FromString("metrics")), path)
	}

	assert.Check(t, is.Equal(c.Resources.Limits.Memory().Cmp(resource.MustParse("128Mi")), 0), "memory limit %v", c.Resources.Limits.Memory())
	assert.Check(t, c.Resources.Limits.Cpu().IsZero(), "a CPU limit throttles heartbeats")
	assert.Check(t, !c.Resources.Requests.Cpu().IsZero() && !c.Resources.Requests.Memory().IsZero(), "requests")
}

func ptr[T any](v T) *T { return &v }

// The optional admission policies decode strictly, take their parameters
// from the one ConfigMap in eip's namespace, and bind eip's own
// ServiceAccount by name.
func TestAdmissionManifests(t *testing.T) {
	objs := decodeAll(t, "admission")
	params := one[*corev1.ConfigMap](t, objs)
	assert.Check(t, is.Equal(params.Namespace, namespace))
	assert.Check(t, is.DeepEqual(slices.Sorted(maps.Keys(params.Data)), []string{"cidrs", "external-ip-namespaces", "external-ips", "max-external-ips"}))
	policies := only[*admissionv1.ValidatingAdmissionPolicy](t, objs)
	bindings := only[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs)
	assert.Equal(t, len(policies), 2)
	assert.Equal(t, len(bindings), len(policies))
	for i, p := range policies {
		assert.Check(t, is.Equal(*p.Spec.FailurePolicy, admissionv1.Fail), p.Name)
		assert.Check(t, is.Equal(p.Spec.ParamKind.Kind, "ConfigMap"), p.Name)
		b := bindings[i]
		assert.Check(t, is.Equal(b.Spec.PolicyName, p.Name))
		assert.Check(t, is.DeepEqual(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}))
		assert.Check(t, is.Equal(b.Spec.ParamRef.Name, params.Name), b.Name)
		assert.Check(t, is.Equal(b.Spec.ParamRef.Namespace, namespace), b.Name)
		assert.Check(t, is.Equal(*b.Spec.ParamRef.ParameterNotFoundAction, admissionv1.DenyAction), b.Name)
	}
	status := policies[1]
	assert.Equal(t, status.Name, "eip-status")
	assert.Check(t, is.Contains(status.Spec.MatchConditions[0].Expression, "'system:serviceaccount:"+namespace+":"+serviceAccount+"'"))
}

// The policy that checks eip-config is on in the base, denies, matches only
// eip-config in eip's namespace, and knows the keys the parser knows: a key
// added to one and not the other fails here.
func TestConfigPolicy(t *testing.T) {
	objs := decodeAll(t, ".")
	p := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, "", configMap)
	b := named[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, "", configMap)
	assert.Check(t, is.Equal(b.Spec.PolicyName, p.Name))
	assert.Check(t, is.DeepEqual(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}))
	assert.Check(t, is.Equal(*p.Spec.FailurePolicy, admissionv1.Fail))
	assert.Check(t, is.Equal(p.Spec.MatchConditions[0].Expression,
		"request.namespace == '"+namespace+"' && object.metadata.name == '"+configMap+"'"))
	var known string
	for _, v := range p.Spec.Variables {
		if v.Name == "known" {
			known = v.Expression
		}
	}
	var keys []string
	assert.NilError(t, yaml.Unmarshal([]byte(strings.ReplaceAll(known, "'", `"`)), &keys), known)
	assert.DeepEqual(t, keys, config.Keys())
}

// The policy that keeps each node to its own Lease writes is on in the base,
// denies, matches eip's Leases in eip's namespace for every write, names
// eip's ServiceAccount, and speaks of the names and annotations package
// lease writes: a rename there fails here.
func TestLeasePolicy(t *testing.T) {
	objs := decodeAll(t, ".")
	p := named[*admissionv1.ValidatingAdmissionPolicy](t, objs, "", "eip-leases")
	b := named[*admissionv1.ValidatingAdmissionPolicyBinding](t, objs, "", "eip-leases")
	assert.Check(t, is.Equal(b.Spec.PolicyName, p.Name))
	assert.Check(t, is.DeepEqual(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}))
	assert.Check(t, is.Equal(*p.Spec.FailurePolicy, admissionv1.Fail))
	rules := p.Spec.MatchConstraints.ResourceRules
	assert.Assert(t, is.Len(rules, 1))
	assert.Check(t, is.DeepEqual(rules[0].Resources, []string{"leases"}))
	assert.Check(t, is.DeepEqual(rules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}))
	assert.Check(t, is.Equal(p.Spec.MatchConditions[0].Expression, "request.namespace == '"+namespace+"'"))
	b2, err := yaml.Marshal(p.Spec)
	assert.NilError(t, err)
	text := string(b2)
	for _, want := range []string{
		"'system:serviceaccount:" + namespace + ":" + serviceAccount + "'",
		"'authentication.kubernetes.io/node-name'",
		"startsWith('" + lease.HeartbeatName("") + "')",
		"'" + lease.AnnotationMoveTo + "'",
		"'" + lease.AnnotationCheckRequest + "'",
	} {
		assert.Check(t, is.Contains(text, want))
	}
}

// The last good configuration ships empty, for eipds to fill with the one
// update their Role allows: applying the manifests again sets no data, so
// it keeps what they wrote.
func TestLastGoodShipsEmpty(t *testing.T) {
	cm := named[*corev1.ConfigMap](t, decodeAll(t, "."), namespace, agent.LastGoodName(configMap))
	assert.Check(t, cm.Data == nil && cm.BinaryData == nil && cm.Annotations == nil, "%+v", cm)
}
