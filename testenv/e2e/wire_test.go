package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// wireHealthy waits until status shows ip bound with a successor whose check
// says the holder answers, and returns the row.
func (e *env) wireHealthy(ip netip.Addr) cli.IP {
	e.t.Helper()
	var row cli.IP
	e.eventually(ip.String()+" checked on the wire and answered by its holder", func() (bool, string) {
		r, ok := statusRow(e.statusJSON(), ip)
		row = r
		return ok && r.State == cli.StateBound && r.Wire.Verdict == "holder" && r.Wire.By == r.Successor && r.Successor != "",
			fmt.Sprintf("%s holder %s successor %s wire %+v", r.State, r.Holder, r.Successor, r.Wire)
	})
	return row
}

// dropARPFrom keeps every ARP frame whose sender address is ip from
// leaving node's LAN interface (an nftables rule on its egress hook): the
// kernel's answers and eipd's announcements alike, while the node's API
// path and liveness datagrams are untouched. The table goes with the test.
func (e *env) dropARPFrom(node string, ip netip.Addr) {
	e.t.Helper()
	table := "eip-e2e-drop-arp"
	nft := func(args ...string) error {
		out, err := e.c.Exec(e.ctx, node, append([]string{"nft"}, args...)...)
		if err != nil {
			return fmt.Errorf("nft %s on %s: %w: %s", strings.Join(args, " "), node, err, out)
		}
		return nil
	}
	e.must(nft("add", "table", "netdev", table))
	e.t.Cleanup(func() { _ = nft("delete", "table", "netdev", table) })
	e.must(nft("add", "chain", "netdev", table, "out", "{ type filter hook egress device eth0 priority 0; }"))
	e.must(nft("add", "rule", "netdev", table, "out", "arp", "saddr", "ip", ip.String(), "drop"))
}

// The holder stays alive, its API path and liveness datagrams working, but
// its answers for one IP stop reaching the LAN. The IP's successor, which
// checks it, reports "none" in status; the holder announces it again, and
// when that is not heard either hands it to the successor, which the
// client then reaches. Two MACs never answer.
func TestWireUnansweredHolderHandsOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip, other := testenv.ServiceIP(181), testenv.ServiceIP(182)
	e.service("unanswered", ip)
	e.service("answered", other)
	holder := e.served(ip)
	e.served(other)
	row := e.wireHealthy(ip)
	checker := row.Successor
	out, err := e.kubectlEip("check")
	assert.NilError(t, err, "a healthy cluster passes the check: %s", out)
	t.Logf("kubectl eip check, healthy:\n%s", out)

	traffic := e.probe(ip)
	e.dropARPFrom(holder, ip)
	broke := time.Now()
	e.eventually("status shows that "+checker+" hears no answer for "+ip.String(), func() (bool, string) {
		r, _ := statusRow(e.statusJSON(), ip)
		return r.Wire.Verdict == "none" && r.Wire.By == checker || r.Holder != holder, fmt.Sprintf("holder %s wire %+v", r.Holder, r.Wire)
	})
	reported := time.Since(broke)
	t.Logf("status showed the verdict %s after the answers stopped", reported.Round(time.Millisecond))
	assert.Assert(t, reported <= 15*time.Second, "reported %s after the answers stopped", reported)
	out, err = e.kubectlEip("check", ip.String())
	assert.ErrorContains(t, err, ip.String()+": none", "stdout: %s", out)
	t.Logf("kubectl eip check, unanswered: %v\n%s", err, out)
	e.warningSince("Service", "unanswered", "AddressUnanswered", broke, ip.String(), checker)

	e.answersFrom(traffic, checker)
	again := time.Since(broke)
	t.Logf("the client was answered from %s %s after the holder's answers stopped", checker, again.Round(time.Millisecond))
	assert.Assert(t, again <= 30*time.Second, "answered again after %s", again)
	assert.Equal(t, e.holder(ip), checker)
	assert.DeepEqual(t, e.boundOn(ip), []string{checker})
	r := traffic.Stop()
	e.noTwoMACs(r)
	e.served(other) // the other IP never moved
}

// Another LAN host (the control-plane namespace) starts answering for a
// held IP. The successor's check reports two MACs: an AddressConflict
// event names the stranger within 5 s, status shows its MAC, and nothing
// moves: the holder keeps the IP and the lock.
func TestWireStrangerAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(183)
	e.service("stranger", ip)
	holder := e.served(ip)
	e.wireHealthy(ip)
	strangerMAC, err := e.c.NodeMAC(testenv.ControlPlane)
	e.must(err)
	moves := e.lock(ip).Spec.LeaseTransitions

	hostAddr := ip.String() + "/16"
	_, err = e.c.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "add", hostAddr, "dev", "eth0")
	e.must(err)
	t.Cleanup(func() { _, _ = e.c.Exec(e.ctx, testenv.ControlPlane, "ip", "addr", "del", hostAddr, "dev", "eth0") })
	since := time.Now()
	msg := e.warningSince("Service", "stranger", "AddressConflict", since, ip.String(), strangerMAC.String())
	took := time.Since(since)
	t.Logf("event after %s: %s", took.Round(time.Millisecond), msg)
	assert.Assert(t, took <= 5*time.Second, "AddressConflict after %s", took)
	e.eventually("status shows the stranger's MAC", func() (bool, string) {
		r, _ := statusRow(e.statusJSON(), ip)
		return r.Wire.Verdict == "two-macs" && strings.Contains(fmt.Sprint(r.Wire.MACs), strangerMAC.String()), fmt.Sprintf("%+v", r.Wire)
	})
	out, err := e.kubectlEip("check", ip.String())
	assert.ErrorContains(t, err, ip.String()+": two-macs", "stdout: %s", out)
	t.Logf("kubectl eip check: %v\n%s", err, out)

	e.throughout("the holder keeps "+ip.String()+" and nothing flaps", 3*leaseDuration, func() string {
		if h := e.holder(ip); h != holder {
			return "held by " + h
		}
		if on := e.boundOn(ip); len(on) != 1 || on[0] != holder {
			return fmt.Sprintf("bound on %v", on)
		}
		return ""
	})
	assert.DeepEqual(t, e.lock(ip).Spec.LeaseTransitions, moves)
	macs, err := e.c.WhoAnswers(ip)
	e.must(err)
	want := []net.HardwareAddr{e.mac(holder), strangerMAC}
	for _, m := range macs {
		assert.Assert(t, bytes.Equal(m, want[0]) || bytes.Equal(m, want[1]), "answered by %s, neither the holder nor the stranger", m)
	}
}

// A healthy cluster of 1,000 IPs: every IP is checked on the wire at least
// once a minute, and checking causes no API write: over a minute no lock
// is written, the heartbeats are renewed no more often than their pace and
// none changes what it reports of the wire. It logs each checking node's
// questions a second and each eipd's CPU over that minute (figures, not
// assertions).
func TestWireThousandIPsQuiet(t *testing.T) {
	// Runs alone (no t.Parallel), like TestLocalThousandServices: its CPU
	// figures would carry other tests' load.
	const n = 1000
	cfg := defaultConfig()
	cfg["ranges"] = "198.18.100.0/22"
	e := newEnv(t, cfg)
	g, ctx := errgroup.WithContext(e.ctx)
	g.SetLimit(8)
	for i := 1; i <= n; i++ {
		ip := testenv.ServiceIP(i)
		g.Go(func() error {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wire-%d", i), Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"}},
				Spec:       corev1.ServiceSpec{ExternalIPs: []string{ip.String()}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
			}
			_, err := e.k.CoreV1().Services(svcNamespace).Create(ctx, svc, metav1.CreateOptions{})
			return err
		})
	}
	e.must(g.Wait())
	e.eventually(fmt.Sprintf("all %d IPs checked and answered by their holder", n), func() (bool, string) {
		healthy, other := 0, map[string]int{}
		for _, r := range e.statusJSON().IPs {
			if r.State == cli.StateBound && r.Wire.Verdict == "holder" {
				healthy++
			} else {
				other[string(r.State)+"/"+r.Wire.Verdict]++
			}
		}
		return healthy == n, fmt.Sprintf("%d healthy, others %v", healthy, other)
	})

	// Every Lease write over the window, as the API server's watch sends it.
	wireText := map[string]string{}
	leases := e.k.CoordinationV1().Leases(testenv.Namespace)
	list, err := leases.List(e.ctx, metav1.ListOptions{})
	e.must(err)
	for _, l := range list.Items {
		wireText[l.Name] = l.Annotations[lease.AnnotationWire]
	}
	w, err := leases.Watch(e.ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	e.must(err)
	defer w.Stop()
	checks := func() map[string]float64 {
		out := map[string]float64{}
		for _, node := range e.nodes {
			out[node] = e.scrape(node).samples["eip_wire_checks_total"]
		}
		return out
	}
	checks0, cpu0 := checks(), e.daemonsCPU()
	const window = time.Minute // a measurement window, not a wait for a condition
	began := time.Now()
	end := time.After(window)
	writes := map[string]int{}
	wireChanged := map[string]bool{}
collect:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch of Leases ended")
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease {
				continue
			}
			writes[l.Labels[lease.RoleLabel]]++
			if wireText[l.Name] != l.Annotations[lease.AnnotationWire] {
				wireChanged[l.Name] = true
			}
			wireText[l.Name] = l.Annotations[lease.AnnotationWire]
		case <-end:
			break collect
		}
	}
	took := time.Since(began)
	checks1, cpu1 := checks(), e.daemonsCPU()
	st := e.statusJSON()
	var stale []string
	for _, r := range st.IPs {
		if r.Wire.CheckedAt == nil || st.ObservedAt.Sub(*r.Wire.CheckedAt) > time.Minute {
			stale = append(stale, fmt.Sprintf("%s (%v)", r.IP, r.Wire.CheckedAt))
		}
	}
	assert.Equal(t, len(stale), 0, "IPs not checked within the last minute: %v", stale[:min(len(stale), 5)])
	assert.Equal(t, writes[lease.RoleLock], 0, "locks written while the wire did not change")
	assert.Equal(t, len(wireChanged), 0, "heartbeats whose wire report changed: %v", wireChanged)
	// With liveness over the LAN a heartbeat is renewed every ten renew
	// intervals (5 s): checking adds nothing to that.
	most := len(e.nodes) * (int(took/(5*time.Second)) + 1)
	assert.Assert(t, writes[lease.RoleHeartbeat] <= most, "%d heartbeat writes in %s, at most %d at their pace", writes[lease.RoleHeartbeat], took, most)
	t.Logf("over %s: %d heartbeat writes, %d lock writes", took.Round(time.Second), writes[lease.RoleHeartbeat], writes[lease.RoleLock])
	for _, node := range e.nodes {
		t.Logf("%s: %.1f questions/s checking the wire, eipd CPU %.2f %% of a core", node,
			(checks1[node]-checks0[node])/took.Seconds(), 100*float64(cpu1[node]-cpu0[node])/float64(took))
	}
}
