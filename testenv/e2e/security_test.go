package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Security (issue 8). The DaemonSet's capabilities and read-only root
// filesystem are checked by manifests/manifests_test.go (TestDaemonSet);
// these tests check what only a running cluster shows.

// A user who may create Services must not be able to make a node answer for
// the node's own address, the LAN's gateway or another host: eipd binds
// only addresses inside the configured ranges, whatever a Service names,
// in spec.externalIPs or in the status of a LoadBalancer Service.
func TestServiceCannotStealLANAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	node, err := e.c.Node(e.nodes[1])
	assert.NilError(t, err)
	cp, _ := testenv.LANPrefixes()
	gateway := cp.Addr().Next() // 198.18.0.1: the control plane, the LAN's "router"
	client := gateway.Next()    // 198.18.0.2: the client host
	victims := []netip.Addr{gateway, client, node.IPv4, node.IPv6}
	good := testenv.ServiceIP(170)
	created := time.Now()
	e.service("steal", append([]netip.Addr{good}, victims...)...)

	// The same addresses through a LoadBalancer Service's status, as a
	// controller with services/status rights (or a careless one) writes it.
	// The Service names a range that does not exist, so eip's allocator
	// refuses it and leaves the status as written: otherwise it trims the
	// status to one address per family, and whether a node's pass saw the
	// four addresses before the trim would be a race.
	lb := e.lbLeftAlone("steal-lb", victims...)

	e.served(good)
	for _, ip := range victims {
		for _, svc := range []string{"steal", "steal-lb"} {
			msg := e.warningSince("Service", svc, "AddressRejected", created, ip.String()+" ")
			t.Logf("%s: %s", svc, msg)
		}
	}
	after, err := e.k.CoreV1().Services(svcNamespace).Get(e.ctx, lb.Name, metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Check(t, len(after.Status.LoadBalancer.Ingress) == len(victims), "the status eip judged is the one written: %v", after.Status.LoadBalancer.Ingress)
	e.neverBound("steal", victims)
	// On the wire, no node answers for them but their owners.
	for _, ip := range victims {
		macs, err := e.c.WhoAnswers(ip)
		assert.NilError(t, err)
		for _, m := range macs {
			if owner := e.nodeOfMAC(m); !strings.HasPrefix(owner, "unknown MAC") {
				assert.Check(t, owner == node.Name && (ip == node.IPv4 || ip == node.IPv6), "%s answered by %s", ip, owner)
			}
		}
	}
}

// lbLeftAlone creates LoadBalancer Service name with ips in its status.
// It names a range that does not exist, so eip's allocator refuses it and
// leaves the status as written.
func (e *env) lbLeftAlone(name string, ips ...netip.Addr) *corev1.Service {
	e.t.Helper()
	lb := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"},
			Annotations: map[string]string{alloc.AnnotationRange: "no-such-range"},
		},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	lb, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, lb, metav1.CreateOptions{})
	e.must(err)
	for _, ip := range ips {
		lb.Status.LoadBalancer.Ingress = append(lb.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
	}
	lb, err = e.k.CoreV1().Services(svcNamespace).UpdateStatus(e.ctx, lb, metav1.UpdateOptions{})
	e.must(err)
	return lb
}

// A LoadBalancer Service whose status lists a node's own address (written
// by hand, or by an implementation before eip) does not keep it: eip never
// binds it, so the allocator writes a free address of its ranges in its
// place, and that one is served.
func TestStatusWithANodeAddressGetsAFreeOne(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["ranges"] += "\n198.18.101.16/28 name=pool auto-assign"
	e := newEnv(t, cfg)
	node, err := e.c.Node(e.nodes[1])
	assert.NilError(t, err)
	// Left alone until its status lists the node's address.
	lb := e.lbLeftAlone("squatter-lb", node.IPv4)
	delete(lb.Annotations, alloc.AnnotationRange)
	_, err = e.k.CoreV1().Services(svcNamespace).Update(e.ctx, lb, metav1.UpdateOptions{})
	assert.NilError(t, err)

	var got netip.Addr
	e.eventually("squatter-lb's status lists an address of the pool", func() (bool, string) {
		s, err := e.k.CoreV1().Services(svcNamespace).Get(e.ctx, lb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ing := s.Status.LoadBalancer.Ingress
		if len(ing) != 1 {
			return false, fmt.Sprintf("status %v", ing)
		}
		got, err = netip.ParseAddr(ing[0].IP)
		return err == nil && netip.MustParsePrefix("198.18.101.16/28").Contains(got), fmt.Sprintf("status %v", ing)
	})
	e.served(got)
	e.neverBound("squatter-lb", []netip.Addr{node.IPv4})
}

// A stolen eipd token writes no Secret but the liveness key (issue 29): it
// may not create a Secret of any name in eip's namespace, where a planted
// one could be a bootstrap token or a Secret another workload expects, nor
// change another one. The key ships empty and the first eipd fills it.
func TestEipdWritesNoSecretButItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	s, err := e.k.CoreV1().Secrets(testenv.Namespace).Get(e.ctx, lanlive.KeySecret, metav1.GetOptions{})
	e.must(err)
	assert.Check(t, len(s.Data[lanlive.KeyField]) == 32, "the first eipd filled the key: %d bytes", len(s.Data[lanlive.KeyField]))

	cfg, err := e.c.ServiceAccountConfig(e.ctx)
	e.must(err)
	sa, err := kubernetes.NewForConfig(cfg)
	e.must(err)
	secrets := sa.CoreV1().Secrets(testenv.Namespace)
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "eip-planted"}, StringData: map[string]string{"token": "planted"}}
	_, err = secrets.Create(e.ctx, planted, metav1.CreateOptions{})
	assert.Check(t, apierrors.IsForbidden(err), "eipd's token created Secret %s: %v", planted.Name, err)
	other, err := e.k.CoreV1().Secrets(testenv.Namespace).Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "eip-e2e-other"}}, metav1.CreateOptions{})
	e.must(err)
	t.Cleanup(func() {
		e.must(e.k.CoreV1().Secrets(testenv.Namespace).Delete(e.ctx, other.Name, metav1.DeleteOptions{}))
	})
	other.StringData = map[string]string{"token": "planted"}
	_, err = secrets.Update(e.ctx, other, metav1.UpdateOptions{})
	assert.Check(t, apierrors.IsForbidden(err), "eipd's token updated Secret %s: %v", other.Name, err)
}

// auditEvent is the part of an audit.k8s.io/v1 Event this test reads.
type auditEvent struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
	Verb    string `json:"verb"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		APIGroup    string `json:"apiGroup"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Annotations    map[string]string `json:"annotations"`
	StageTimestamp metav1.MicroTime  `json:"stageTimestamp"`
}

// permission is one (API group, resource[/subresource], verb) in one scope
// ("" for cluster-wide, else the namespace).
type permission struct {
	scope, group, resource, verb string
}

func (p permission) String() string {
	g := p.group
	if g == "" {
		g = "core"
	}
	where := "cluster"
	if p.scope != "" {
		where = p.scope
	}
	return fmt.Sprintf("%s %s/%s %s", where, g, p.resource, p.verb)
}

// unusedOnPurpose lists granted permissions this workload does not use,
// each with the reason it is granted anyway. Keep it short: an entry here
// is a right a stolen token has without eipd needing it.
var unusedOnPurpose = func() map[permission]string {
	const listFallback = "informers stream their initial list through a watch (WatchList, on in client-go since 1.35); " +
		"against an API server that cannot, they fall back to LIST"
	ns := testenv.Namespace
	return map[permission]string{
		{"", "", "services", "list"}:                       listFallback,
		{"", "", "nodes", "list"}:                          listFallback,
		{ns, "coordination.k8s.io", "leases", "list"}:      listFallback,
		{ns, "", "configmaps", "list"}:                     listFallback,
		{"", "discovery.k8s.io", "endpointslices", "list"}: listFallback,
	}
}()

// The ServiceAccount eip uses every right the manifests grant it and is
// refused none: the API server's audit log of a workload that exercises
// every code path that talks to the API (start, bind, auto-assignment,
// events and their repeats, a move, a graceful stop, a Service deleted)
// is compared with the live ClusterRole and Roles from manifests/rbac.yaml.
func TestRBACMatchesWhatEipdUses(t *testing.T) {
	t.Parallel()
	began := time.Now()
	cfg := defaultConfig()
	cfg["ranges"] += "\n198.18.101.0/28 name=pool auto-assign"
	e := newEnv(t, cfg)

	ip := testenv.ServiceIP(175)
	e.service("audited", ip)
	holder := e.served(ip)
	lb := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "audited-lb", Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"}},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	_, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, lb, metav1.CreateOptions{})
	assert.NilError(t, err)
	e.eventually("audited-lb gets an address", func() (bool, string) {
		s, err := e.k.CoreV1().Services(svcNamespace).Get(e.ctx, "audited-lb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(s.Status.LoadBalancer.Ingress) > 0, "no ingress yet"
	})
	// The same Warning twice from one daemon: the second is a patch of the
	// first Event.
	bad := defaultConfig()
	bad["ranges"] = cfg["ranges"]
	for _, policy := range []string{"random", "other", "random"} {
		bad["policy"] = policy
		edited := time.Now()
		e.setConfig(bad)
		e.warningSince("ConfigMap", testenv.ConfigMap, "InvalidConfig", edited, `policy "`+policy+`"`)
	}
	e.setConfig(cfg)
	// A move (the holder's handoff), a graceful stop (handoffs and the
	// heartbeat deleted) and a deleted Service (its lock deleted).
	target := e.other(holder)
	e.editLock(ip, func(l *coordinationv1.Lease) { l.Annotations[lease.AnnotationMoveTo] = target })
	e.eventually(ip.String()+" moves to "+target, func() (bool, string) {
		return e.holder(ip) == target, "holder " + e.holder(ip)
	})
	e.must(e.c.StopDaemon(target, syscall.SIGTERM))
	e.served(ip)
	e.deleteService("audited")
	e.eventually("lock deleted", func() (bool, string) { return e.lock(ip) == nil, "still there" })
	e.start(target)

	used, denied := e.auditedSince(began)
	granted := e.granted()
	var lines []string
	for p := range used {
		lines = append(lines, p.String())
	}
	sort.Strings(lines)
	t.Logf("used by system:serviceaccount:%s:%s:\n  %s", testenv.Namespace, testenv.ServiceAccount, strings.Join(lines, "\n  "))
	for p, n := range denied {
		t.Errorf("refused %d times: %s", n, p)
	}
	for p := range used {
		assert.Check(t, covers(granted, p), "used but not granted: %s", p)
	}
	for _, p := range granted {
		if slices.ContainsFunc(slices.Collect(maps.Keys(used)), func(u permission) bool { return covers([]permission{p}, u) }) {
			continue
		}
		if why, ok := unusedOnPurpose[p]; ok {
			t.Logf("granted, unused here: %s (%s)", p, why)
			continue
		}
		t.Errorf("granted but never used: %s: remove it from manifests/rbac.yaml, or say in unusedOnPurpose why it stays", p)
	}
}

// auditedSince reads the audit log: the permissions the ServiceAccount eip
// used since t, and those it was refused, with counts.
func (e *env) auditedSince(t time.Time) (used, denied map[permission]int) {
	e.t.Helper()
	f, err := os.Open(e.c.AuditLog())
	e.must(err)
	defer f.Close()
	user := "system:serviceaccount:" + testenv.Namespace + ":" + testenv.ServiceAccount
	used, denied = map[permission]int{}, map[permission]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			e.t.Fatalf("audit log: %v", err)
		}
		if ev.User.Username != user || ev.ObjectRef == nil || ev.StageTimestamp.Before(&metav1.MicroTime{Time: t}) {
			continue
		}
		if ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted" {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		p := permission{scope: ev.ObjectRef.Namespace, group: ev.ObjectRef.APIGroup, resource: res, verb: ev.Verb}
		if ev.Annotations["authorization.k8s.io/decision"] == "forbid" {
			denied[p]++
			continue
		}
		used[p]++
	}
	e.must(sc.Err())
	return used, denied
}

// granted expands the live ClusterRole eip and the Roles eip (in eip's
// namespace and in default) into single permissions: cluster-wide ones
// with scope "", a Role's with its namespace.
func (e *env) granted() []permission {
	e.t.Helper()
	cr, err := e.k.RbacV1().ClusterRoles().Get(e.ctx, "eip", metav1.GetOptions{})
	e.must(err)
	var out []permission
	add := func(scope string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, permission{scope: scope, group: g, resource: res, verb: v})
					}
				}
			}
		}
	}
	add("", cr.Rules)
	role, err := e.k.RbacV1().Roles(testenv.Namespace).Get(e.ctx, "eip", metav1.GetOptions{})
	e.must(err)
	add(testenv.Namespace, role.Rules)
	return out
}

// covers: a cluster-wide grant covers every namespace.
func covers(granted []permission, p permission) bool {
	return slices.ContainsFunc(granted, func(g permission) bool {
		return g.group == p.group && g.resource == p.resource && g.verb == p.verb && (g.scope == "" || g.scope == p.scope)
	})
}

// The API server's address is never bound (issue 14, (b)): binding it would
// point every node's traffic to the API server at one node, and under
// api-loss hold nothing could undo that. A range that contains it is
// refused and the last good configuration stays in force; a Service that
// names it is rejected; every eipd keeps renewing through the API server
// and only the control plane answers for its address.
func TestAPIServerAddressIsNeverBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	cp, _ := testenv.LANPrefixes()
	apiServer := cp.Addr().Next() // 198.18.0.1, where every eipd reaches the API server
	good := testenv.ServiceIP(171)
	e.service("good", good)
	holder := e.served(good)

	bad := defaultConfig()
	bad["ranges"] += "\n" + apiServer.String() + "-" + apiServer.String()
	edited := time.Now()
	e.setConfig(bad)
	msg := e.warningSince("ConfigMap", testenv.ConfigMap, "InvalidConfig", edited, "contains "+apiServer.String()+", an address of the API server")
	t.Logf("refused: %s", msg)

	e.service("api", apiServer)
	msg = e.warningSince("Service", "api", "AddressRejected", edited, apiServer.String()+" ", "an address of the API server")
	t.Logf("rejected: %s", msg)
	e.neverBound("api", []netip.Addr{apiServer})

	// The last good configuration is still in force: the good IP stays
	// where it was, and every node still renews through the API server.
	assert.Equal(t, e.served(good), holder)
	renewed := map[string]time.Time{}
	for _, n := range e.nodes {
		l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(n), metav1.GetOptions{})
		e.must(err)
		renewed[n] = l.Spec.RenewTime.Time
	}
	e.eventually("every node renews its heartbeat", func() (bool, string) {
		for _, n := range e.nodes {
			l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(n), metav1.GetOptions{})
			if err != nil || !l.Spec.RenewTime.After(renewed[n]) {
				return false, n + " has not renewed"
			}
		}
		return true, ""
	})
	macs, err := e.c.WhoAnswers(apiServer)
	assert.NilError(t, err)
	assert.Equal(t, len(macs), 1, "%s answered by %v", apiServer, macs)
	for _, m := range macs {
		owner := e.nodeOfMAC(m)
		assert.Check(t, strings.HasPrefix(owner, "unknown MAC"), "%s answered by %s", apiServer, owner)
	}
}
