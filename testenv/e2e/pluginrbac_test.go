package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// The plugin's shipped roles, on the real API server, for users who are not
// admins: eip-view runs status and cannot move; eip-operator, bound in eip's
// namespace next to eip-view, moves, and may not update a Lease anywhere
// else. A user who may request a move but not watch the lock gets the
// request withdrawn, not left to act later.
func TestPluginRoles(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["lease-duration"] = "10s"
	e := newEnv(t, cfg)
	root, err := testenv.RepoRoot()
	e.must(err)
	e.must(e.c.ApplyFiles(e.ctx, filepath.Join(root, "manifests", "plugin-rbac.yaml")))
	ip := testenv.ServiceIP(116)
	e.service("web", ip)
	holder := e.served(ip)
	target := e.other(holder)

	e.bindUser("e2e-viewer", "eip-view", "")
	e.bindUser("e2e-operator", "eip-view", "")
	e.bindUser("e2e-operator", "eip-operator", testenv.Namespace)
	// Everything move needs but the watch: eip-view without watch, and
	// update on Leases.
	e.role("e2e-eip-nowatch", []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list"}},
	})
	e.bindUser("e2e-nowatch", "e2e-eip-nowatch", "")

	out, err := e.kubectlEip("--as", "e2e-viewer", "status", "-o", "json")
	e.must(err)
	var st cli.Status
	e.must(json.Unmarshal([]byte(out), &st))
	row, ok := statusRow(st, ip)
	assert.Assert(t, ok, "%s", out)
	assert.Equal(t, row.Holder, holder)
	assert.Equal(t, row.State, cli.StateBound)
	assert.Assert(t, is.Len(st.Warnings, 0))

	_, err = e.kubectlEip("--as", "e2e-viewer", "move", ip.String(), target)
	assert.ErrorContains(t, err, `User "e2e-viewer" cannot update resource "leases"`)
	l := e.lock(ip)
	assert.Equal(t, *l.Spec.HolderIdentity, holder)
	assert.Equal(t, l.Annotations[lease.AnnotationMoveTo], "")

	out, err = e.kubectlEip("--as", "e2e-operator", "move", ip.String(), target)
	e.must(err)
	assert.Assert(t, strings.HasPrefix(out, "moved "+ip.String()+" from "+holder+" to "+target+" in "), "%s", out)
	assert.Equal(t, e.served(ip), target)
	// eip-operator bound in eip's namespace: no other Lease of the cluster.
	can, _ := e.c.Exec(e.ctx, testenv.Client, e.c.KubectlPath(), "--kubeconfig", e.c.AdminKubeconfig(),
		"auth", "can-i", "update", "leases.coordination.k8s.io", "-n", "kube-system", "--as", "e2e-operator")
	assert.Equal(t, strings.TrimSpace(string(can)), "no")

	// The holder, frozen, cannot act on the request before the plugin
	// takes it back. A lease duration of 10 s keeps its peers from taking
	// its IPs meanwhile.
	pid := e.c.DaemonPID(target)
	assert.Assert(t, pid != 0)
	e.must(syscall.Kill(pid, syscall.SIGSTOP))
	frozen := true
	thaw := func() {
		if frozen {
			frozen = false
			e.must(syscall.Kill(pid, syscall.SIGCONT))
		}
	}
	t.Cleanup(thaw)
	_, err = e.kubectlEip("--as", "e2e-nowatch", "move", ip.String(), holder)
	l = e.lock(ip)
	thaw()
	assert.Check(t, is.ErrorContains(err, `cannot watch resource "leases"`))
	assert.Check(t, is.ErrorContains(err, "the move request was withdrawn"))
	assert.Check(t, is.Equal(l.Annotations[lease.AnnotationMoveTo], ""), "a request is left on the lock")
	assert.Check(t, is.Equal(e.served(ip), target), "the IP stays where it was")
}

// bindUser binds user to the ClusterRole role: cluster-wide, or in
// namespace when one is given. The binding goes when the test ends.
func (e *env) bindUser(user, role, namespace string) {
	e.t.Helper()
	meta := metav1.ObjectMeta{Name: user + "-" + role, Namespace: namespace}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
	rbac := e.k.RbacV1()
	if namespace == "" {
		_, err := rbac.ClusterRoleBindings().Create(e.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects, RoleRef: ref}, metav1.CreateOptions{})
		e.must(err)
		e.t.Cleanup(func() { e.gone(rbac.ClusterRoleBindings().Delete(e.ctx, meta.Name, metav1.DeleteOptions{})) })
		return
	}
	_, err := rbac.RoleBindings(namespace).Create(e.ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects, RoleRef: ref}, metav1.CreateOptions{})
	e.must(err)
	e.t.Cleanup(func() { e.gone(rbac.RoleBindings(namespace).Delete(e.ctx, meta.Name, metav1.DeleteOptions{})) })
}

// role creates the ClusterRole name for the test's length.
func (e *env) role(name string, rules []rbacv1.PolicyRule) {
	e.t.Helper()
	_, err := e.k.RbacV1().ClusterRoles().Create(e.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	e.must(err)
	e.t.Cleanup(func() { e.gone(e.k.RbacV1().ClusterRoles().Delete(e.ctx, name, metav1.DeleteOptions{})) })
}

// gone fails the test unless err is nil or says the object is gone already.
func (e *env) gone(err error) {
	e.t.Helper()
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Errorf("clean up: %v", err)
	}
}
