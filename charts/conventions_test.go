package charts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/internal/config"
)

// The conventions of a chart: pull secrets, pod labels and annotations,
// affinity, the log level and extra flags reach eipd's pods.
func TestChartPodValues(t *testing.T) {
	objs := objects(t, helm(t, "template", "eip", "charts/eip",
		"--set", "imagePullSecrets[0].name=regcred",
		"--set", "podLabels.team=net,podAnnotations.example\\.com/owner=net",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=edge",
		"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"--set", "logLevel=debug", "--set", "extraArgs={--kube-api-qps=100,--kube-api-burst=200}",
		"--set", "image.digest=sha256:"+strings.Repeat("ab", 32),
	))
	ds := one[appsv1.DaemonSet](t, objs, "DaemonSet eip-system/eipd")
	pod := ds.Spec.Template
	assert.Check(t, is.DeepEqual(pod.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}}))
	assert.Check(t, is.Equal(pod.Labels["team"], "net"))
	assert.Check(t, is.Equal(pod.Annotations["example.com/owner"], "net"))
	assert.Check(t, is.Equal(pod.Annotations["prometheus.io/scrape"], "true"), "the chart's own annotations stay")
	assert.Check(t, is.DeepEqual(ds.Spec.Selector.MatchLabels, map[string]string{"app.kubernetes.io/name": "eip", "app.kubernetes.io/component": "eipd"}),
		"pod labels never enter the selector, which cannot change")
	terms := pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	assert.Check(t, is.Equal(terms[0].MatchExpressions[0].Key, "edge"))
	c := pod.Spec.Containers[0]
	assert.Check(t, is.DeepEqual(c.Args, []string{"--metrics-addr=:9402", "--v=1", "--kube-api-qps=100", "--kube-api-burst=200"}))
	assert.Check(t, is.Equal(c.Image, "ghcr.io/eip-project/eipd:"+appVersion(t)+"@sha256:"+strings.Repeat("ab", 32)))

	trace := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "logLevel=trace"))
	ds = one[appsv1.DaemonSet](t, trace, "DaemonSet eip-system/eipd")
	assert.Check(t, is.DeepEqual(ds.Spec.Template.Spec.Containers[0].Args, []string{"--metrics-addr=:9402", "--v=2"}))
}

// appVersion is the chart's appVersion, the image tag it installs.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "eip", "Chart.yaml"))
	assert.NilError(t, err)
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	assert.NilError(t, yaml.Unmarshal(b, &c))
	return c.AppVersion
}

// With serviceAccount.create false, eipd runs as the named account, which
// eip's roles are bound to, and the chart makes none.
func TestChartServiceAccount(t *testing.T) {
	objs := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "serviceAccount.create=false,serviceAccount.name=edge"))
	_, made := objs["ServiceAccount eip-system/eip"]
	assert.Check(t, !made)
	for k := range objs {
		assert.Check(t, !strings.HasPrefix(k, "ServiceAccount "), "made %s", k)
	}
	ds := one[appsv1.DaemonSet](t, objs, "DaemonSet eip-system/eipd")
	assert.Check(t, is.Equal(ds.Spec.Template.Spec.ServiceAccountName, "edge"))
	for _, k := range []string{"ClusterRoleBinding <nil>/eip", "RoleBinding eip-system/eip"} {
		b := one[rbacv1.ClusterRoleBinding](t, objs, k)
		assert.Check(t, is.DeepEqual(b.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "edge", Namespace: "eip-system"}}), k)
	}
	// The lease policy holds that account to its node.
	policy, err := yaml.Marshal(objs["ValidatingAdmissionPolicy <nil>/eip-leases"])
	assert.NilError(t, err)
	assert.Check(t, is.Contains(string(policy), "'system:serviceaccount:eip-system:edge'"))
	objs = objects(t, helm(t, "template", "eip", "charts/eip", "--set", "serviceAccount.name=edge"))
	_, made = objs["ServiceAccount eip-system/edge"]
	assert.Check(t, made, "created under its name: %v", keys(objs))
}

// nameOverride names eip's label and objects; fullnameOverride the
// objects alone. The ConfigMap and the liveness key keep their names:
// eipd's Role grants those names alone; so does the policy that checks the
// ConfigMap, named after it.
func TestChartNames(t *testing.T) {
	objs := objects(t, helm(t, "template", "eip", "charts/eip", "--set", "fullnameOverride=lb,serviceMonitor.enabled=true,prometheusRule.enabled=true"))
	want := []string{
		"ClusterRole <nil>/lb", "ClusterRole <nil>/lb-operator", "ClusterRole <nil>/lb-view", "ClusterRoleBinding <nil>/lb",
		"ConfigMap eip-system/eip-admission", "ConfigMap eip-system/eip-config", "ConfigMap eip-system/eip-config-last-good", "DaemonSet eip-system/lbd", "Namespace <nil>/eip-system", "PrometheusRule eip-system/lb",
		"Role eip-system/lb", "RoleBinding eip-system/lb", "Secret eip-system/eip-liveness-key", "Service eip-system/lbd-metrics",
		"ServiceAccount eip-system/lb", "ServiceMonitor eip-system/lbd",
		"ValidatingAdmissionPolicy <nil>/eip-config", "ValidatingAdmissionPolicy <nil>/eip-leases",
		"ValidatingAdmissionPolicy <nil>/eip-services", "ValidatingAdmissionPolicy <nil>/eip-status",
		"ValidatingAdmissionPolicyBinding <nil>/eip-config", "ValidatingAdmissionPolicyBinding <nil>/eip-leases",
		"ValidatingAdmissionPolicyBinding <nil>/eip-services", "ValidatingAdmissionPolicyBinding <nil>/eip-status",
	}
	assert.DeepEqual(t, keys(objs), want)
	binding := one[rbacv1.RoleBinding](t, objs, "RoleBinding eip-system/lb")
	assert.Check(t, is.Equal(binding.RoleRef.Name, "lb"))
	assert.Check(t, is.Equal(binding.Subjects[0].Name, "lb"))
	ds := one[appsv1.DaemonSet](t, objs, "DaemonSet eip-system/lbd")
	assert.Check(t, is.Equal(ds.Spec.Template.Spec.ServiceAccountName, "lb"))
	assert.Check(t, is.Equal(ds.Labels["app.kubernetes.io/name"], "eip"))

	objs = objects(t, helm(t, "template", "eip", "charts/eip", "--set", "nameOverride=edge-ips"))
	ds = one[appsv1.DaemonSet](t, objs, "DaemonSet eip-system/edge-ipsd")
	assert.Check(t, is.Equal(ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"], "edge-ips"))
	assert.Check(t, is.Equal(ds.Spec.Template.Labels["app.kubernetes.io/name"], "edge-ips"))
}

// values.schema.json refuses a misspelt value, at any depth, naming it.
func TestChartSchemaRefusesMisspeltValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"imagee.tag=v1", "imagee"},
		{"image.tga=v1", "tga"},
		{"config.lease-duraton=3s", "lease-duraton"},
		{"serviceAccount.create=maybe", "serviceAccount"},
		{"logLevel=verbose", "logLevel"},
		{"daemonset.priorityClass=x", "priorityClass"},
	} {
		_, err := runHelm(t, "template", "eip", "charts/eip", "--set", tc.set)
		assert.Check(t, is.ErrorContains(err, tc.want), tc.set)
		assert.Check(t, is.ErrorContains(err, "values don't meet the specifications of the schema"), tc.set)
	}
}

// schema is the part of values.schema.json the tests read.
type schema struct {
	Properties map[string]schema `json:"properties"`
}

func readSchema(t *testing.T) schema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "eip", "values.schema.json"))
	assert.NilError(t, err)
	var s schema
	assert.NilError(t, json.Unmarshal(b, &s))
	return s
}

// leaves lists the dotted paths of the schema's values: a value whose
// schema lists no properties is one, whatever its type.
func (s schema) leaves(prefix string) []string {
	var out []string
	for name, p := range s.Properties {
		if len(p.Properties) == 0 {
			out = append(out, prefix+name)
			continue
		}
		out = append(out, p.leaves(prefix+name+".")...)
	}
	slices.Sort(out)
	return out
}

// documented lists the dotted paths of values.yaml the same way.
func documented(t *testing.T, s schema) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "eip", "values.yaml"))
	assert.NilError(t, err)
	var values map[string]any
	assert.NilError(t, yaml.Unmarshal(b, &values))
	var walk func(prefix string, v map[string]any, s schema) []string
	walk = func(prefix string, v map[string]any, s schema) []string {
		var out []string
		for k, x := range v {
			sub, ok := s.Properties[k]
			if m, isMap := x.(map[string]any); isMap && ok && len(sub.Properties) > 0 {
				out = append(out, walk(prefix+k+".", m, sub)...)
				continue
			}
			out = append(out, prefix+k)
		}
		return out
	}
	out := walk("", values, s)
	slices.Sort(out)
	return out
}

// The schema and values.yaml name the same values (global aside, which
// Helm gives every chart), and config names every key eipd reads.
func TestChartSchemaMatchesValues(t *testing.T) {
	s := readSchema(t)
	leaves := slices.DeleteFunc(s.leaves(""), func(p string) bool { return p == "global" })
	assert.DeepEqual(t, documented(t, s), leaves)
	var cfg []string
	for k := range s.Properties["config"].Properties {
		cfg = append(cfg, k)
	}
	slices.Sort(cfg)
	assert.DeepEqual(t, cfg, slices.Sorted(slices.Values(config.Keys())))
}

// sampleValues gives every documented value something other than its
// default, with the values it needs to show (a ServiceMonitor's interval
// shows only with the ServiceMonitor).
var sampleValues = map[string]struct {
	value any
	needs map[string]any
}{
	"namespace.name":                 {value: "edge-ips"},
	"namespace.create":               {value: false},
	"bgpPasswordSecrets":             {value: []string{"bgp-a"}},
	"nameOverride":                   {value: "edge"},
	"fullnameOverride":               {value: "lb"},
	"image.repository":               {value: "registry.example/eipd"},
	"image.tag":                      {value: "v9.8.7"},
	"image.digest":                   {value: "sha256:" + strings.Repeat("cd", 32)},
	"image.pullPolicy":               {value: "Always"},
	"imagePullSecrets":               {value: []map[string]string{{"name": "regcred"}}},
	"serviceAccount.create":          {value: false},
	"serviceAccount.name":            {value: "edge"},
	"podLabels":                      {value: map[string]string{"team": "net"}},
	"podAnnotations":                 {value: map[string]string{"team": "net"}},
	"affinity":                       {value: map[string]any{"podAntiAffinity": map[string]any{}}},
	"logLevel":                       {value: "debug"},
	"extraArgs":                      {value: []string{"--kube-api-qps=100"}},
	"config.iface":                   {value: "eth1"},
	"config.netmask":                 {value: "24"},
	"config.netmask6":                {value: "64"},
	"config.policy":                  {value: "spread"},
	"config.node-selector":           {value: "edge=true"},
	"config.lease-duration":          {value: "4s"},
	"config.renew-interval":          {value: "1s"},
	"config.api-loss":                {value: "fence"},
	"config.fence-after":             {value: "1500ms"},
	"config.liveness-port":           {value: "9500"},
	"config.heartbeat-writes":        {value: "8"},
	"config.announce-interval":       {value: "5m"},
	"config.external-ips":            {value: "off"},
	"config.port-filter":             {value: "off"},
	"config.max-ips-per-service":     {value: "8"},
	"config.max-ips-per-namespace":   {value: "500"},
	"config.load-balancer-class":     {value: "only"},
	"config.preferred-nodes":         {value: "node-a"},
	"config.ranges":                  {value: "192.0.2.240/28 auto-assign"},
	"config.bgp-asn":                 {value: "64512"},
	"config.bgp-router-id":           {value: "192.0.2.1"},
	"config.bgp-peers":               {value: "192.0.2.254 asn=64513"},
	"daemonset.nodeSelector":         {value: map[string]string{"edge": "true"}},
	"daemonset.tolerations":          {value: []map[string]string{{"key": "edge", "operator": "Exists"}}},
	"daemonset.resources":            {value: map[string]any{"requests": map[string]string{"cpu": "1"}}},
	"daemonset.goMemLimit":           {value: "90MiB"},
	"daemonset.goMaxProcs":           {value: 2},
	"daemonset.priorityClassName":    {value: "eip-critical"},
	"metrics.port":                   {value: 9500},
	"serviceMonitor.enabled":         {value: true},
	"serviceMonitor.interval":        {value: "30s", needs: map[string]any{"serviceMonitor.enabled": true}},
	"serviceMonitor.labels":          {value: map[string]string{"release": "prom"}, needs: map[string]any{"serviceMonitor.enabled": true}},
	"prometheusRule.enabled":         {value: true},
	"prometheusRule.labels":          {value: map[string]string{"release": "prom"}, needs: map[string]any{"prometheusRule.enabled": true}},
	"prometheusRule.unboundFor":      {value: "1m", needs: map[string]any{"prometheusRule.enabled": true}},
	"grafanaDashboard.enabled":       {value: true},
	"grafanaDashboard.labels":        {value: map[string]string{"grafana_dashboard": "eip"}, needs: map[string]any{"grafanaDashboard.enabled": true}},
	"grafanaDashboard.annotations":   {value: map[string]string{"grafana_folder": "Network"}, needs: map[string]any{"grafanaDashboard.enabled": true}},
	"configPolicy.enabled":           {value: false},
	"leasePolicy.enabled":            {value: false},
	"admission.enabled":              {value: false},
	"admission.externalIPs":          {value: "off"},
	"admission.externalIPNamespaces": {value: "team-a"},
	"admission.cidrs":                {value: "192.0.2.0/28"},
	"admission.maxExternalIPs":       {value: "8"},
}

// valuesFile writes values, keyed by dotted path, as a values file.
func valuesFile(t *testing.T, values map[string]any) string {
	t.Helper()
	doc := map[string]any{}
	for p, v := range values {
		m := doc
		steps := strings.Split(p, ".")
		for _, s := range steps[:len(steps)-1] {
			if _, ok := m[s]; !ok {
				m[s] = map[string]any{}
			}
			m = m[s].(map[string]any)
		}
		m[steps[len(steps)-1]] = v
	}
	b, err := yaml.Marshal(doc)
	assert.NilError(t, err)
	f := filepath.Join(t.TempDir(), "values.yaml")
	assert.NilError(t, os.WriteFile(f, b, 0o644))
	return f
}

// Every documented value, set to something else, changes what the chart
// renders, and passes `helm lint --strict`: no value is ignored, and
// none is missing from the samples (a new value needs one).
func TestChartEveryValueRenders(t *testing.T) {
	for _, p := range documented(t, readSchema(t)) {
		t.Run(p, func(t *testing.T) {
			sample, ok := sampleValues[p]
			assert.Assert(t, ok, "values.yaml documents %s, which sampleValues has no sample for", p)
			base := valuesFile(t, sample.needs)
			with := map[string]any{p: sample.value}
			for k, v := range sample.needs {
				with[k] = v
			}
			set := valuesFile(t, with)
			before := helm(t, "template", "eip", "charts/eip", "-f", base)
			after := helm(t, "template", "eip", "charts/eip", "-f", set)
			assert.Check(t, before != after, "%s=%v renders nothing new", p, sample.value)
			out := helm(t, "lint", "--strict", "charts/eip", "-f", set)
			assert.Check(t, is.Contains(out, "1 chart(s) linted, 0 chart(s) failed"), out)
		})
	}
}

// NOTES.txt says what to do next: wait for eipd, give it a range when it
// has none, and make a Service.
func TestChartNotes(t *testing.T) {
	out := helm(t, "install", "eip", "charts/eip", "--dry-run=client")
	for _, want := range []string{
		"kubectl -n eip-system rollout status daemonset/eipd",
		"eip binds nothing yet: config.ranges names no range",
		"--set-string config.ranges='192.0.2.240/28 auto-assign'",
		"kubectl expose deployment web --type=LoadBalancer --port=80",
		"kubectl eip status\n",
	} {
		assert.Check(t, is.Contains(out, want))
	}
	out = helm(t, "install", "eip", "charts/eip", "--dry-run=client", "--set-string", "config.ranges=192.0.2.240/28 auto-assign",
		"--set", "config.load-balancer-class=only,namespace.name=edge-ips")
	assert.Check(t, is.Contains(out, "eip binds addresses of these ranges:\n\n     192.0.2.240/28 auto-assign\n"))
	assert.Check(t, is.Contains(out, "give it spec.loadBalancerClass: eip.io/eip"))
	assert.Check(t, is.Contains(out, "kubectl eip status -n edge-ips"))
	assert.Check(t, !strings.Contains(out, "binds nothing yet"), fmt.Sprint(out))
}
