package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

const (
	svcNamespace = "default"
	e2eLabel     = "eip-e2e"
	// Long enough for the slowest condition on a loaded 2-core machine;
	// these are deadlines, not measurements.
	settle = 20 * time.Second
)

// defaultConfig is the ConfigMap data most tests run with.
func defaultConfig() map[string]string {
	return map[string]string{
		"ranges": "198.18.100.0/24\n2001:db8::100:0/112",
	}
}

// heartbeatsConfig is defaultConfig with liveness over the LAN off, for the
// tests of what heartbeats alone do: a holder that loses only its API path
// is then taken over, and a killed node's heartbeat goes stale within a
// lease duration.
func heartbeatsConfig() map[string]string {
	cfg := defaultConfig()
	cfg["liveness-port"] = "off"
	return cfg
}

// env is one test's handle on its cluster.
type env struct {
	t     *testing.T
	ctx   context.Context
	c     *testenv.Cluster
	k     kubernetes.Interface
	nodes []string
}

// newEnv borrows a cluster for t (see clusters) and resets it to a known
// state: no eipd running, no test Services, no eip Leases, no test
// addresses on any node, the given configuration, then eipd started on
// every node and its heartbeat seen.
func newEnv(t *testing.T, cfg map[string]string) *env {
	t.Helper()
	c := lender.get(t)
	e := &env{t: t, ctx: context.Background(), c: c, k: c.Client()}
	for _, n := range c.Nodes() {
		e.nodes = append(e.nodes, n.Name)
	}
	for _, n := range e.nodes {
		if e.c.DaemonRunning(n) {
			e.must(e.c.StopDaemon(n, syscall.SIGKILL))
		}
	}
	svcs, err := e.k.CoreV1().Services(svcNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: e2eLabel})
	e.must(err)
	for _, s := range svcs.Items {
		e.must(e.k.CoreV1().Services(svcNamespace).Delete(e.ctx, s.Name, metav1.DeleteOptions{}))
	}
	e.must(e.k.CoordinationV1().Leases(testenv.Namespace).DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: lease.ManagedByLabel}))
	// Like a fresh install, the liveness key is empty, as the manifests
	// ship it, and the first eipd to start fills it.
	key, err := e.k.CoreV1().Secrets(testenv.Namespace).Get(e.ctx, lanlive.KeySecret, metav1.GetOptions{})
	e.must(err)
	key.Data = nil
	_, err = e.k.CoreV1().Secrets(testenv.Namespace).Update(e.ctx, key, metav1.UpdateOptions{})
	e.must(err)
	for _, n := range e.nodes {
		_, _ = e.c.Exec(e.ctx, n, "ip", "link", "del", "eip0")
	}
	e.eventually("no test address left on any node", func() (bool, string) {
		for _, n := range e.nodes {
			if a := e.testAddrs(n); len(a) > 0 {
				return false, fmt.Sprintf("%s still has %v", n, a)
			}
		}
		return true, ""
	})
	e.setConfig(cfg)
	for _, n := range e.nodes {
		e.start(n)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range e.nodes {
				t.Logf("eipd log of %s: %s", n, e.c.DaemonLog(n))
			}
		}
	})
	return e
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) eventually(what string, cond func() (bool, string)) {
	e.t.Helper()
	testenv.Eventually(e.t, settle, func() (bool, string) {
		ok, msg := cond()
		return ok, what + ": " + msg
	})
}

// start starts eipd on node and waits for its heartbeat.
func (e *env) start(node string, args ...string) {
	e.t.Helper()
	e.must(e.c.StartDaemon(node, args...))
	e.eventually("heartbeat of "+node, func() (bool, string) {
		_, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(node), metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

func (e *env) setConfig(data map[string]string) {
	e.t.Helper()
	cms := e.k.CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(e.ctx, testenv.ConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: testenv.ConfigMap}, Data: data}, metav1.CreateOptions{})
		e.must(err)
		return
	}
	e.must(err)
	cm.Data = data
	_, err = cms.Update(e.ctx, cm, metav1.UpdateOptions{})
	e.must(err)
}

func (e *env) service(name string, ips ...netip.Addr) *corev1.Service {
	e.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"}},
		Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	for _, ip := range ips {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, ip.String())
	}
	out, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, svc, metav1.CreateOptions{})
	e.must(err)
	return out
}

func (e *env) deleteService(name string) {
	e.t.Helper()
	e.must(e.k.CoreV1().Services(svcNamespace).Delete(e.ctx, name, metav1.DeleteOptions{}))
}

// lock reads the lock Lease of ip; nil when there is none.
func (e *env) lock(ip netip.Addr) *coordinationv1.Lease {
	e.t.Helper()
	l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.NameFor(ip), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	e.must(err)
	return l
}

func (e *env) holder(ip netip.Addr) string {
	l := e.lock(ip)
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func (e *env) mac(node string) net.HardwareAddr {
	e.t.Helper()
	m, err := e.c.NodeMAC(node)
	e.must(err)
	return m
}

func (e *env) nodeOfMAC(mac net.HardwareAddr) string {
	for _, n := range e.nodes {
		if bytes.Equal(e.mac(n), mac) {
			return n
		}
	}
	if rt, err := e.c.RouterMAC(); err == nil && bytes.Equal(rt, mac) {
		return "router"
	}
	return "unknown MAC " + mac.String()
}

// testAddrs lists the test-range addresses bound on node (eth0, eipd's
// device, and eip0 where a test's configuration puts them).
func (e *env) testAddrs(node string) []netip.Prefix {
	e.t.Helper()
	var out []netip.Prefix
	all, err := e.c.NodeAddrs(node)
	e.must(err)
	out = append(out, inTestRanges(all)...)
	for _, dev := range []string{"eip0"} {
		if b, err := e.c.Exec(e.ctx, node, "ip", "-o", "addr", "show", "dev", dev); err == nil {
			out = append(out, inTestRanges(parseIPAddr(string(b)))...)
		}
	}
	return out
}

func inTestRanges(all []netip.Prefix) []netip.Prefix {
	v4 := netip.MustParsePrefix("198.18.100.0/22")
	routed := netip.MustParsePrefix("198.19.100.0/24")
	v6 := netip.MustParsePrefix("2001:db8::100:0/112")
	routed6 := netip.MustParsePrefix("2001:db8:100::/112")
	var out []netip.Prefix
	for _, p := range all {
		if a := p.Addr(); v4.Contains(a) || routed.Contains(a) || v6.Contains(a) || routed6.Contains(a) {
			out = append(out, p)
		}
	}
	return out
}

// parseIPAddr reads the prefixes out of `ip -o addr` output.
func parseIPAddr(out string) []netip.Prefix {
	var ps []netip.Prefix
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" || f[i] == "inet6" {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil {
					ps = append(ps, p)
				}
			}
		}
	}
	return ps
}

// boundOn lists the nodes that have ip on an interface.
func (e *env) boundOn(ip netip.Addr) []string {
	var on []string
	for _, n := range e.nodes {
		for _, p := range e.testAddrs(n) {
			if p.Addr() == ip {
				on = append(on, n)
			}
		}
	}
	return on
}

// served waits until ip is held, bound on exactly its holder, and the
// client's ARP/NDP question is answered by exactly the holder's MAC. It
// returns the holder.
func (e *env) served(ip netip.Addr) string {
	e.t.Helper()
	var holder string
	e.eventually(ip.String()+" served by its holder alone", func() (bool, string) {
		holder = e.holder(ip)
		if holder == "" {
			return false, "no holder"
		}
		on := e.boundOn(ip)
		if len(on) != 1 || on[0] != holder {
			return false, fmt.Sprintf("holder %s, bound on %v", holder, on)
		}
		macs, err := e.c.WhoAnswers(ip)
		if err != nil {
			return false, err.Error()
		}
		if len(macs) != 1 || !bytes.Equal(macs[0], e.mac(holder)) {
			return false, fmt.Sprintf("holder %s, answered by %v", holder, macs)
		}
		return true, ""
	})
	return holder
}

// probe pings ip from the client every 10 ms until the returned stop.
func (e *env) probe(ip netip.Addr) *testenv.Probe {
	e.t.Helper()
	p, err := e.c.Probe(ip, 0)
	e.must(err)
	e.t.Cleanup(func() { p.Stop() })
	return p
}

// noTwoMACs fails when the client ever saw two MACs answer for one IP
// within a probe interval.
func (e *env) noTwoMACs(r testenv.ProbeResult) {
	e.t.Helper()
	if ov := r.Overlaps(); len(ov) > 0 {
		e.t.Errorf("%s: two MACs answered: %v", r.Target, ov)
	}
	e.t.Logf("%s: %d sent, %d lost, longest gap %s, MACs %v", r.Target, r.Sent, r.Lost(), r.LongestGap().Duration(), r.MACs())
}

// answersFrom waits until the probe's latest reply comes from node.
func (e *env) answersFrom(p *testenv.Probe, node string) {
	e.t.Helper()
	want := e.mac(node)
	e.eventually("replies from "+node, func() (bool, string) {
		r := p.Result()
		last := r.LastMAC()
		if len(r.Replies) == 0 || !bytes.Equal(last, want) {
			return false, fmt.Sprintf("last reply from %v", last)
		}
		return time.Since(r.Replies[len(r.Replies)-1].At) < time.Second, "replies stopped"
	})
}

func (e *env) other(than ...string) string {
	for _, n := range e.nodes {
		skip := false
		for _, t := range than {
			skip = skip || n == t
		}
		if !skip {
			return n
		}
	}
	e.t.Fatal("no other node")
	return ""
}

// events are the Events of reason about the object kind name, which is
// in svcNamespace, eip's own for a ConfigMap, or written "namespace/name".
func (e *env) events(kind, name, reason string) []corev1.Event {
	e.t.Helper()
	ns := svcNamespace
	if kind == "ConfigMap" {
		ns = testenv.Namespace
	}
	if n, short, ok := strings.Cut(name, "/"); ok {
		ns, name = n, short
	}
	list, err := e.k.CoreV1().Events(ns).List(e.ctx, metav1.ListOptions{})
	e.must(err)
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}
