package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// leasePolicyName is the policy of manifests/lease-policy.yaml, which every
// refusal it makes names.
const leasePolicyName = "eip-leases"

// leasePolicy applies manifests/lease-policy.yaml and removes it when the
// test ends: it binds cluster-wide.
func (e *env) leasePolicy() {
	e.t.Helper()
	root, err := testenv.RepoRoot()
	e.must(err)
	file := filepath.Join(root, "manifests", "lease-policy.yaml")
	e.must(e.c.ApplyFiles(e.ctx, file))
	e.t.Cleanup(func() {
		if out, err := e.c.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", file); err != nil {
			e.t.Errorf("delete the lease policy: %v\n%s", err, out)
		}
	})
}

// asNode is a client that authenticates as eipd on node does: the
// ServiceAccount eip with a token bound to its Pod on that Node.
func (e *env) asNode(node string) kubernetes.Interface {
	e.t.Helper()
	cfg, err := e.c.NodeServiceAccountConfig(e.ctx, node)
	e.must(err)
	k, err := kubernetes.NewForConfig(cfg)
	e.must(err)
	return k
}

// refusedByLeasePolicy asserts that err is the lease policy's refusal,
// saying want.
func refusedByLeasePolicy(t *testing.T, err error, want string) {
	t.Helper()
	assert.Assert(t, err != nil, "admitted; want refused with %q", want)
	assert.Check(t, apierrors.IsForbidden(err), "%v", err)
	assert.Check(t, is.Contains(err.Error(), leasePolicyName))
	assert.Check(t, is.Contains(err.Error(), want))
}

// The lease policy on the real API server, with every eipd's token bound
// to its Pod on its Node as a kubelet's is. One node's eipd may not write
// another node's heartbeat nor put a lock it does not hold in a third
// node's hands; a token of eip's ServiceAccount bound to no node writes no
// Lease; a user of eip-operator changes the move request and nothing else.
// Under the policy a move, a killed holder's failover and a graceful
// hand-off go through, and no eipd is refused a write.
func TestLeasePolicyNodeIdentity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	root, err := testenv.RepoRoot()
	e.must(err)
	e.must(e.c.ApplyFiles(e.ctx, filepath.Join(root, "manifests", "plugin-rbac.yaml")))
	e.bindUser("e2e-lease-operator", "eip-view", "")
	e.bindUser("e2e-lease-operator", "eip-operator", testenv.Namespace)
	e.leasePolicy()
	ip := testenv.ServiceIP(118)
	e.service("web", ip)
	holder := e.served(ip)
	x := e.other(holder)
	y := e.other(holder, x)
	asX := e.asNode(x).CoordinationV1().Leases(testenv.Namespace)
	update := func(leases interface {
		Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
	}, name string, edit func(*coordinationv1.Lease), dryRun bool) error {
		// The eipds renew their heartbeats and locks meanwhile: a write
		// from a stale read is refused for its resourceVersion before the
		// policy judges it, so it is read and tried again.
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, name, metav1.GetOptions{})
			e.must(err)
			edit(l)
			opts := metav1.UpdateOptions{}
			if dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err = leases.Update(e.ctx, l, opts)
			return err
		})
	}
	annotate := func(k, v string) func(*coordinationv1.Lease) {
		return func(l *coordinationv1.Lease) { l.Annotations[k] = v }
	}
	e.eventually("the policy is in force", func() (bool, string) {
		err := update(asX, lease.HeartbeatName(holder), annotate(lease.AnnotationHeld, "0"), true)
		return err != nil && strings.Contains(err.Error(), leasePolicyName), fmt.Sprint(err)
	})

	// As x's eipd: its own heartbeat, yes; another node's, or a heartbeat
	// in the name of a node that does not exist, no.
	assert.NilError(t, update(asX, lease.HeartbeatName(x), annotate(lease.AnnotationHeld, "7"), true))
	refusedByLeasePolicy(t, update(asX, lease.HeartbeatName(holder), annotate(lease.AnnotationHeld, "99"), false),
		"node "+x+" may write only its own heartbeat "+lease.HeartbeatName(x)+", not "+lease.HeartbeatName(holder))
	ghost := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: lease.HeartbeatName("ghost"), Namespace: testenv.Namespace}}
	_, err = asX.Create(e.ctx, ghost, metav1.CreateOptions{})
	refusedByLeasePolicy(t, err, "may write only its own heartbeat")
	// A lock held by another node: not handed to a third, not released;
	// taking it for itself is what a failover does, and is allowed.
	refusedByLeasePolicy(t, update(asX, lease.NameFor(ip), func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = &y }, false),
		"node "+x+" may write lock "+lease.NameFor(ip)+" only as its holder before or after the write")
	refusedByLeasePolicy(t, update(asX, lease.NameFor(ip), annotate(lease.AnnotationSuccessor, "e2e-elsewhere"), false), "may write lock")
	assert.NilError(t, update(asX, lease.NameFor(ip), func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = &x }, true))

	// A token of eipd's account bound to no Pod names no node.
	cfg, err := e.c.ServiceAccountConfig(e.ctx)
	e.must(err)
	unbound, err := kubernetes.NewForConfig(cfg)
	e.must(err)
	refusedByLeasePolicy(t, update(unbound.CoordinationV1().Leases(testenv.Namespace), lease.HeartbeatName(x), annotate(lease.AnnotationHeld, "7"), false),
		"this token names no node")

	// As eip-operator: the move request, yes; the holder or the successor,
	// no.
	operator := e.impersonating("e2e-lease-operator").CoordinationV1().Leases(testenv.Namespace)
	refusedByLeasePolicy(t, update(operator, lease.NameFor(ip), func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = &x }, false),
		"a user may change only "+lease.AnnotationMoveTo+" of "+lease.NameFor(ip))
	refusedByLeasePolicy(t, update(operator, lease.NameFor(ip), annotate(lease.AnnotationSuccessor, "e2e-elsewhere"), false),
		"a user may change only "+lease.AnnotationMoveTo)
	refusedByLeasePolicy(t, update(operator, lease.HeartbeatName(x), annotate(lease.AnnotationHeld, "99"), false),
		"a user may change only "+lease.AnnotationCheckRequest+" of "+lease.HeartbeatName(x))
	assert.NilError(t, update(operator, lease.NameFor(ip), annotate(lease.AnnotationMoveTo, x), true))
	assert.Equal(t, e.holder(ip), holder, "refused writes changed the lock")

	// Normal operation under the policy: the operator moves the IP to x,
	// x's eipd is killed and a survivor takes over, and that survivor hands
	// it off when stopped gracefully.
	out, err := e.kubectlEip("--as", "e2e-lease-operator", "move", ip.String(), x)
	e.must(err)
	assert.Assert(t, strings.HasPrefix(out, "moved "+ip.String()+" from "+holder+" to "+x), "%s", out)
	assert.Equal(t, e.served(ip), x)
	p := e.probe(ip)
	e.answersFrom(p, x)
	killed := time.Now()
	e.must(e.c.StopDaemon(x, syscall.SIGKILL))
	next := e.takenOver(ip, x, p)
	stopped := time.Now()
	e.must(e.c.StopDaemon(next, syscall.SIGTERM))
	last := e.takenOver(ip, next, p)
	r := p.Stop()
	e.noTwoMACs(r)
	// The probe runs from just before the kill to just after the hand-off,
	// so most of its pings fall in the failover, which waits out the killed
	// holder's lease: its lost pings are that wait, not a fault.
	t.Logf("moved to %s; failed over to %s, answering %s after the SIGKILL; handed off to %s, answering %s after the SIGTERM",
		x, next, firstReplyFrom(r, e.mac(next), killed), last, firstReplyFrom(r, e.mac(last), stopped))

	for _, n := range e.nodes {
		log, err := os.ReadFile(e.c.DaemonLog(n))
		e.must(err)
		assert.Check(t, !strings.Contains(string(log), leasePolicyName), "eipd on %s was refused a write by the lease policy: %s", n, e.c.DaemonLog(n))
	}
}
