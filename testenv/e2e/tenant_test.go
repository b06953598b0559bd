package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Tenants: Services of two namespaces, as two teams that may each create
// Services in their own namespace only (CVE-2020-8554).
const (
	tenantA = "eip-e2e-team-a"
	tenantB = "eip-e2e-team-b"
)

// tenant makes namespace ns if it is missing and deletes the test's
// Services in it now (a failed run may have left some) and when the test
// ends.
func (e *env) tenant(ns string) {
	e.t.Helper()
	_, err := e.k.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		e.must(err)
	}
	clean := func() error {
		svcs, err := e.k.CoreV1().Services(ns).List(e.ctx, metav1.ListOptions{LabelSelector: e2eLabel})
		if err != nil {
			return err
		}
		for _, s := range svcs.Items {
			if err := e.k.CoreV1().Services(ns).Delete(e.ctx, s.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	e.must(clean())
	e.t.Cleanup(func() {
		if err := clean(); err != nil {
			e.t.Errorf("delete the Services of %s: %v", ns, err)
		}
	})
}

// serviceIn creates Service ns/name naming ips in spec.externalIPs.
func (e *env) serviceIn(ns, name string, ips []netip.Addr, opts ...svcOption) {
	e.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{e2eLabel: "true"}, Annotations: map[string]string{}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	for _, ip := range ips {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, ip.String())
	}
	for _, o := range opts {
		o(svc)
	}
	_, err := e.k.CoreV1().Services(ns).Create(e.ctx, svc, metav1.CreateOptions{})
	e.must(err)
}

// A team cannot take another team's address: its claim is refused with an
// Event that says why, and `kubectl eip status` says it too, while the
// owner's address stays where it is. Two teams share an address only when
// both carry the same sharing key, the owner lists the other team in
// eip.io/share-with, and their ports differ; only the owner's team
// chooses where it lives.
func TestTenantCannotTakeAnotherNamespacesAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.tenant(tenantA)
	e.tenant(tenantB)
	taken, shared := testenv.ServiceIP(180), testenv.ServiceIP(181)
	key := annotated(ipset.AnnotationSharingKey, "web")

	e.serviceIn(tenantA, "web", []netip.Addr{taken, shared}, key, annotated(ipset.AnnotationShareWith, tenantB))
	holder := e.served(taken)
	e.served(shared)
	// Created later: the addresses are team A's. A creationTimestamp has
	// whole seconds, and Services created in web's second would be ordered
	// by name, picky before web: the next ones wait for the next second.
	web, err := e.k.CoreV1().Services(tenantA).Get(e.ctx, "web", metav1.GetOptions{})
	e.must(err)
	e.eventually("a second after web was created", func() (bool, string) {
		return time.Now().After(web.CreationTimestamp.Add(time.Second)), web.CreationTimestamp.String()
	})
	created := time.Now()
	e.serviceIn(tenantB, "steal", []netip.Addr{taken})
	e.serviceIn(tenantB, "shared", []netip.Addr{shared}, key, withPorts(443), annotated(ipset.AnnotationPreferredNodes, e.other(e.holder(shared))))
	e.serviceIn(tenantA, "picky", []netip.Addr{shared}, annotated(ipset.AnnotationPreferredNodes, "Node_X"))

	msg := e.warningSince("Service", tenantB+"/steal", "AddressRejected", created, taken.String()+" ", "held for "+tenantA+"/web, of another namespace")
	t.Logf("%s: %s", taken, msg)
	msg = e.warningSince("Service", tenantB+"/shared", "PreferenceIgnored", created, shared.String()+" ",
		"only Services of namespace "+tenantA+", which holds the address")
	t.Logf("%s: %s", shared, msg)
	msg = e.warningSince("Service", tenantA+"/picky", "PreferenceIgnored", created, `"Node_X" is not a node name`)
	t.Logf("%s: %s", shared, msg)
	e.statusShows("refused for "+tenantB+"/steal: held for "+tenantA+"/web", "-o", "wide")
	assert.Check(t, e.holder(taken) == holder, "%s moved from %s to %s", taken, holder, e.holder(taken))
	for _, ev := range e.events("Service", tenantB+"/shared", "AddressRejected") {
		t.Errorf("%s/shared shares %s under the owner's key, yet: %s", tenantB, shared, ev.Message)
	}
}

// A Service of another namespace, older than the owner of a served
// address, edited to name it is refused: the lock records the owner, and
// the owner keeps its address whatever the other's age. The holder and the
// owner stay, and the owner's clients are answered throughout, by HTTP on
// its port (which the port filter would close were the older Service, on
// another port, the owner) and by ping.
func TestOlderServiceCannotTakeAServedAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.tenant(tenantA)
	e.tenant(tenantB)
	ip := testenv.ServiceIP(184)
	e.serviceIn(tenantB, "older", nil, withPorts(8080))
	older, err := e.k.CoreV1().Services(tenantB).Get(e.ctx, "older", metav1.GetOptions{})
	e.must(err)
	// A creationTimestamp has whole seconds: web is created in a later one.
	e.eventually("a second after older was created", func() (bool, string) {
		return time.Now().After(older.CreationTimestamp.Add(time.Second)), older.CreationTimestamp.String()
	})
	for _, n := range e.nodes {
		e.serveHTTP(n, 8081)
		e.proxyTCP(n, ip, 80, 8081)
	}
	e.serviceIn(tenantA, "web", []netip.Addr{ip}, withPorts(80))
	holder := e.served(ip)
	owner := func() string {
		l := e.lock(ip)
		return l.Annotations[lease.AnnotationOwner] + " " + l.Annotations[lease.AnnotationOwnerUID]
	}
	web, err := e.k.CoreV1().Services(tenantA).Get(e.ctx, "web", metav1.GetOptions{})
	e.must(err)
	want := tenantA + "/web " + string(web.UID)
	assert.Equal(t, owner(), want)
	client := e.c.ClientHTTP()
	client.Timeout = time.Second
	answered := func() string {
		got, err := httpGet(client, "http://"+ip.String()+"/")
		switch {
		case err != nil:
			return fmt.Sprintf("HTTP to %s: %v", ip, err)
		case got != holder:
			return fmt.Sprintf("HTTP to %s answered by %s, not its holder %s", ip, got, holder)
		}
		return ""
	}
	e.eventually("HTTP to "+ip.String()+" answered by "+holder, func() (bool, string) {
		msg := answered()
		return msg == "", msg
	})
	p := e.probe(ip)
	e.answersFrom(p, holder)

	edited := time.Now()
	older.Spec.ExternalIPs = []string{ip.String()}
	_, err = e.k.CoreV1().Services(tenantB).Update(e.ctx, older, metav1.UpdateOptions{})
	e.must(err)
	msg := e.warningSince("Service", tenantB+"/older", "AddressRejected", edited, ip.String()+" ", "held for "+tenantA+"/web, of another namespace")
	t.Logf("%s: %s", ip, msg)
	e.statusShows("refused for "+tenantB+"/older: held for "+tenantA+"/web", "-o", "wide")
	// Every node has computed ownership again since the edit (one of
	// them said so): a few renewals more for anything to move.
	e.throughout("HTTP and ping to "+ip.String()+" answered by "+holder, 3*time.Second, func() string {
		if msg := answered(); msg != "" {
			return msg
		}
		return e.stillAnswering(map[netip.Addr]*testenv.Probe{ip: p}, map[netip.Addr]string{ip: holder}, 500*time.Millisecond)()
	})
	r := p.Stop()
	e.noTwoMACs(r)
	assert.Check(t, r.Lost() <= r.Sent/100, "%d of %d pings lost", r.Lost(), r.Sent)
	assert.Check(t, e.holder(ip) == holder, "%s moved from %s to %s", ip, holder, e.holder(ip))
	assert.Check(t, owner() == want, "the lock of %s records %s, not %s", ip, owner(), want)
	// This web's alone: a Service of the same name in an earlier test on
	// this pooled cluster left its Events behind.
	for _, ev := range e.events("Service", tenantA+"/web", "AddressRejected") {
		if ev.InvolvedObject.UID == web.UID {
			t.Errorf("%s/web was refused its own address: %s", tenantA, ev.Message)
		}
	}
}

// proxyTCP stands in for kube-proxy on node, until the test ends: TCP to
// ip:port goes to the node's own address at port to (DNAT at dstnat,
// where kube-proxy's nftables mode puts it). The port filter decides
// before it, as before kube-proxy's, whether ip:port is served.
func (e *env) proxyTCP(node string, ip netip.Addr, port, to uint16) {
	e.t.Helper()
	n, err := e.c.Node(node)
	e.must(err)
	const table = "eip-e2e-proxy"
	del := func() { _, _ = e.c.Exec(e.ctx, node, "nft", "delete table ip "+table) }
	del()
	_, err = e.c.Exec(e.ctx, node, "nft", fmt.Sprintf("add table ip %[1]s; add chain ip %[1]s pre { type nat hook prerouting priority dstnat; }; add rule ip %[1]s pre ip daddr %[2]s tcp dport %[3]d dnat to %[4]s:%[5]d",
		table, ip, port, n.IPv4, to))
	e.must(err)
	e.t.Cleanup(del)
}

// serveHTTP answers HTTP on every address of node at port with the
// node's name, until the test ends: a host service bound to all addresses.
func (e *env) serveHTTP(node string, port uint16) {
	e.t.Helper()
	ln, err := e.c.ListenTCP(node, port)
	e.must(err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, node) }), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	e.t.Cleanup(func() { _ = srv.Close() })
}

// httpGet is the body of a GET of url.
func httpGet(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// The caps of eip-config refuse, with an Event that names the cap, the
// addresses a Service names beyond max-ips-per-service (the last it
// names) and those a namespace's Services name beyond
// max-ips-per-namespace (the youngest Service's), which are never bound,
// while the others are served; another namespace is not counted. The
// namespace's cap counts the addresses its Services own first: an older
// Service of the namespace edited to name a new address is refused it,
// and the younger one's served address is answered throughout.
func TestCapsRefuseAddressesBeyondThem(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["max-ips-per-service"], cfg["max-ips-per-namespace"] = "2", "3"
	e := newEnv(t, cfg)
	e.tenant(tenantA)
	e.tenant(tenantB)
	ip := func(i int) netip.Addr { return testenv.ServiceIP(185 + i) }
	created := time.Now()
	e.serviceIn(tenantA, "many", []netip.Addr{ip(0), ip(1), ip(2)})
	e.serviceIn(tenantA, "idle", nil)
	e.served(ip(0))
	e.served(ip(1))
	many, err := e.k.CoreV1().Services(tenantA).Get(e.ctx, "many", metav1.GetOptions{})
	e.must(err)
	// A creationTimestamp has whole seconds: more is created in a later one.
	e.eventually("a second after many was created", func() (bool, string) {
		return time.Now().After(many.CreationTimestamp.Add(time.Second)), many.CreationTimestamp.String()
	})
	e.serviceIn(tenantA, "more", []netip.Addr{ip(3), ip(4)})
	e.serviceIn(tenantB, "other", []netip.Addr{ip(5), ip(6)})
	e.served(ip(3))
	e.served(ip(5))
	e.served(ip(6))
	msg := e.warningSince("Service", tenantA+"/many", "AddressRejected", created, ip(2).String()+" ", "more than 2 addresses (max-ips-per-service")
	t.Logf("%s: %s", ip(2), msg)
	msg = e.warningSince("Service", tenantA+"/more", "AddressRejected", created, ip(4).String()+" ", "namespace "+tenantA+" name more than 3 addresses (max-ips-per-namespace")
	t.Logf("%s: %s", ip(4), msg)
	e.neverBound(tenantA+"/many and more", []netip.Addr{ip(2), ip(4)})

	served, fresh := e.holder(ip(3)), testenv.ServiceIP(195)
	p := e.probe(ip(3))
	e.answersFrom(p, served)
	edited := time.Now()
	idle, err := e.k.CoreV1().Services(tenantA).Get(e.ctx, "idle", metav1.GetOptions{})
	e.must(err)
	idle.Spec.ExternalIPs = []string{fresh.String()}
	_, err = e.k.CoreV1().Services(tenantA).Update(e.ctx, idle, metav1.UpdateOptions{})
	e.must(err)
	e.throughout(ip(3).String()+", owned by "+tenantA+"/more, answered by "+served, 2*leaseDuration, e.stillAnswering(map[netip.Addr]*testenv.Probe{ip(3): p}, map[netip.Addr]string{ip(3): served}, 500*time.Millisecond))
	msg = e.warningSince("Service", tenantA+"/idle", "AddressRejected", edited, fresh.String()+" ", "namespace "+tenantA+" name more than 3 addresses (max-ips-per-namespace")
	t.Logf("%s: %s", fresh, msg)
	r := p.Stop()
	e.noTwoMACs(r)
	assert.Check(t, r.Lost() <= r.Sent/100, "%d of %d pings to %s lost", r.Lost(), r.Sent, ip(3))
	assert.Check(t, e.holder(ip(3)) == served, "%s moved from %s to %s", ip(3), served, e.holder(ip(3)))
	e.neverBound(tenantA+"/more and idle", []netip.Addr{ip(4), fresh})
	for _, ev := range e.events("Service", tenantA+"/more", "AddressRejected") {
		if strings.Contains(ev.Message, ip(3).String()+" ") && !lastSeen(ev).Before(edited.Truncate(time.Second)) {
			t.Errorf("%s/more was refused its served address after the edit: %s", tenantA, ev.Message)
		}
	}
}

// A range kept for some namespaces (namespaces=) serves no other: another
// namespace's Service naming one of its addresses is refused with an Event
// that says why, and the address is never bound.
func TestRangeKeptForNamespaces(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["ranges"] += "\n198.18.103.0/24 name=team-a namespaces=" + tenantA
	e := newEnv(t, cfg)
	e.tenant(tenantA)
	e.tenant(tenantB)
	kept, theirs := netip.MustParseAddr("198.18.103.5"), netip.MustParseAddr("198.18.103.6")
	created := time.Now()
	e.serviceIn(tenantB, "steal", []netip.Addr{kept})
	e.serviceIn(tenantA, "web", []netip.Addr{theirs})
	e.served(theirs)
	msg := e.warningSince("Service", tenantB+"/steal", "AddressRejected", created, kept.String()+" ",
		"range team-a is only for namespace "+tenantA+", not "+tenantB)
	t.Logf("%s: %s", kept, msg)
	e.statusShows("range team-a is only for namespace", "-o", "wide")
	e.neverBound(tenantB+"/steal", []netip.Addr{kept})
}

// With external-ips off, eip manages the addresses of LoadBalancer
// Services only: a Service's spec.externalIPs are refused and reported.
func TestExternalIPsOff(t *testing.T) {
	t.Parallel()
	cfg := allocConfig()
	cfg["external-ips"] = "off"
	e := newEnv(t, cfg)
	ip := testenv.ServiceIP(182)
	created := time.Now()
	e.service("external", ip)
	e.lbService("lb")
	e.served(e.lbIPs("lb", 1)[0])
	msg := e.warningSince("Service", "external", "AddressRejected", created, ip.String()+" ", "external-ips: off")
	t.Logf("%s: %s", ip, msg)
	e.neverBound("external", []netip.Addr{ip})
	e.statusShows("external-ips: off", "-o", "wide")
}
