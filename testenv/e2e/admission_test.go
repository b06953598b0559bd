package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/testenv"
)

// tenantUser may create, update and delete Services in tenantA and
// tenantB, and nothing else.
const tenantUser = "eip-e2e-tenant"

// admission applies manifests/admission with params as the data of its
// eip-admission ConfigMap, and removes it when the test ends: the policies
// bind cluster-wide.
func (e *env) admission(params map[string]string) {
	e.t.Helper()
	root, err := testenv.RepoRoot()
	e.must(err)
	dir := filepath.Join(root, "manifests", "admission")
	out, err := e.c.Kubectl(e.ctx, "apply", "--server-side", "--field-manager=eip-e2e", "--validate=strict", "-k", dir)
	e.must(err)
	e.t.Cleanup(func() {
		if out, err := e.c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-k", dir); err != nil {
			e.t.Errorf("delete the admission policies: %v\n%s", err, out)
		}
	})
	e.t.Logf("applied %s:\n%s", dir, out)
	e.setAdmissionParams(params)
}

func (e *env) setAdmissionParams(params map[string]string) {
	e.t.Helper()
	cms := e.k.CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(e.ctx, "eip-admission", metav1.GetOptions{})
	e.must(err)
	cm.Data = params
	_, err = cms.Update(e.ctx, cm, metav1.UpdateOptions{})
	e.must(err)
}

// impersonating is a client acting as user, through the admin's right to
// impersonate.
func (e *env) impersonating(user string) kubernetes.Interface {
	e.t.Helper()
	cfg := e.c.AdminConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	k, err := kubernetes.NewForConfig(cfg)
	e.must(err)
	return k
}

// grantServices lets user create, update and delete Services in each
// namespace, and nothing else.
func (e *env) grantServices(user string, namespaces ...string) {
	e.t.Helper()
	for _, ns := range namespaces {
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "create", "update", "delete"}}},
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if _, err := e.k.RbacV1().Roles(ns).Create(e.ctx, role, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			e.must(err)
		}
		if _, err := e.k.RbacV1().RoleBindings(ns).Create(e.ctx, binding, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			e.must(err)
		}
	}
}

// tenantService is a Service ns/name for the tenant to create.
func tenantService(ns, name string, externalIPs []string, opts ...svcOption) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{e2eLabel: "true"}, Annotations: map[string]string{}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, ExternalIPs: externalIPs},
	}
	for _, o := range opts {
		o(svc)
	}
	return svc
}

// refused asserts that err is the API server's refusal by an admission
// policy, saying want.
func refused(t *testing.T, err error, want string) {
	t.Helper()
	assert.Assert(t, err != nil, "admitted; want refused with %q", want)
	assert.Check(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "%v", err)
	assert.Check(t, strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), "%v", err)
	assert.Check(t, strings.Contains(err.Error(), want), "%v", err)
}

// The optional admission policies (manifests/admission) refuse, on the real
// API server, what eipd would refuse later, to a user who may only create
// Services in two namespaces; they admit what that user may do; and they
// keep eip's own ServiceAccount, which every node holds, to writing
// in-range load-balancer addresses of its own Services, while eipd's own
// allocation still goes through.
func TestAdmissionPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	e.tenant(tenantA)
	e.tenant(tenantB)
	e.grantServices(tenantUser, tenantA, tenantB)
	e.admission(map[string]string{"external-ips": "on", "external-ip-namespaces": tenantA, "cidrs": "198.18.100.0/22, 2001:db8::100:0/112", "max-external-ips": "2"})
	tenant := e.impersonating(tenantUser)
	create := func(svc *corev1.Service, dryRun bool) error {
		opts := metav1.CreateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := tenant.CoreV1().Services(svc.Namespace).Create(e.ctx, svc, opts)
		return err
	}
	steal := tenantService(tenantB, "steal", []string{testenv.ServiceIP(190).String()})
	e.eventually("the policies are in force", func() (bool, string) {
		err := create(steal, true)
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), fmt.Sprint(err)
	})

	// The user is no admin: RBAC refuses it anything beyond its Services.
	err := create(tenantService("default", "elsewhere", nil), false)
	assert.Check(t, apierrors.IsForbidden(err) && strings.Contains(err.Error(), `User "`+tenantUser+`" cannot create resource "services"`), "%v", err)

	refused(t, create(steal, false), "spec.externalIPs are not allowed in namespace "+tenantB)
	assert.NilError(t, create(tenantService(tenantB, "plain", nil), false))
	assert.NilError(t, create(tenantService(tenantA, "web", []string{testenv.ServiceIP(190).String(), "2001:db8::100:90"}), false))
	refused(t, create(tenantService(tenantA, "gateway", []string{"198.18.0.1", testenv.ServiceIP(191).String()}), false),
		"spec.externalIPs 198.18.0.1: outside the addresses eip serves")
	refused(t, create(tenantService(tenantA, "many", []string{testenv.ServiceIP(191).String(), testenv.ServiceIP(192).String(), testenv.ServiceIP(193).String()}), false),
		"spec.externalIPs names 3 addresses: at most 2 (eip-admission max-external-ips)")
	refused(t, create(tenantService(tenantA, "picky", nil, annotated(ipset.AnnotationPreferredNodes, "node-1,Node_X")), false),
		"annotation eip.io/preferred-nodes must list node names")
	assert.NilError(t, create(tenantService(tenantA, "placed", nil, annotated(ipset.AnnotationPreferredNodes, "node-1, node-2")), false))
	// An update that leaves spec.externalIPs as they are is let through.
	web, err := tenant.CoreV1().Services(tenantA).Get(e.ctx, "web", metav1.GetOptions{})
	assert.NilError(t, err)
	web.Labels["edited"] = "true"
	_, err = tenant.CoreV1().Services(tenantA).Update(e.ctx, web, metav1.UpdateOptions{})
	assert.NilError(t, err)

	// eip's ServiceAccount: its own allocation goes through, a write that
	// eipd never makes does not.
	e.lbService("lb")
	e.served(e.lbIPs("lb", 1)[0])
	eip := e.impersonating("system:serviceaccount:" + testenv.Namespace + ":" + testenv.ServiceAccount)
	patch := func(name string, status map[string]any) error {
		b, err := json.Marshal(map[string]any{"status": status})
		e.must(err)
		_, err = eip.CoreV1().Services(svcNamespace).Patch(e.ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
		return err
	}
	ingress := func(entries ...map[string]any) map[string]any {
		return map[string]any{"loadBalancer": map[string]any{"ingress": entries}}
	}
	refused(t, patch("lb", ingress(map[string]any{"ip": "198.18.0.1"})), "status.loadBalancer.ingress 198.18.0.1: eip writes only addresses inside eip-admission cidrs")
	refused(t, patch("lb", ingress(map[string]any{"hostname": "lb.example.com"})), "never a hostname")
	refused(t, patch("lb", map[string]any{"conditions": []map[string]any{{"type": "Ready", "status": "True", "reason": "Forged", "message": "",
		"lastTransitionTime": "2026-12-01T00:00:00Z"}}}), "eip may change only status.loadBalancer of a Service")
	other := e.newLB("other", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") })
	_, err = e.k.CoreV1().Services(svcNamespace).Create(e.ctx, other, metav1.CreateOptions{})
	assert.NilError(t, err)
	refused(t, patch("other", ingress(map[string]any{"ip": testenv.ServiceIP(192).String()})), "only for type LoadBalancer Services of its class")
	assert.NilError(t, patch("lb", ingress(map[string]any{"ip": testenv.ServiceIP(193).String()})), "an in-range address of eip's own Service")
	assert.DeepEqual(t, alloc.Current(ipset.ServiceOf(e.getService("lb"))), []netip.Addr{testenv.ServiceIP(193)}, cmpAddrs)

	// external-ips off refuses every namespace.
	e.setAdmissionParams(map[string]string{"external-ips": "off", "external-ip-namespaces": "*", "cidrs": "198.18.100.0/22"})
	e.eventually("external-ips off is in force", func() (bool, string) {
		err := create(tenantService(tenantA, "again", []string{testenv.ServiceIP(194).String()}), true)
		return err != nil && strings.Contains(err.Error(), "external-ips: off"), fmt.Sprint(err)
	})
	assert.NilError(t, create(tenantService(tenantA, "lb", nil, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }), false))
}
