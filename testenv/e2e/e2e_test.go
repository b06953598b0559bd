package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// 1. Every IP of a Service answers from exactly one node, and each IP has
// its own lock.
func TestServiceIPsAnswerFromOneNodeEach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ips := []netip.Addr{testenv.ServiceIP(1), testenv.ServiceIP(2), testenv.ServiceIP(3)}
	e.service("web", ips...)
	names := map[string]bool{}
	for _, ip := range ips {
		holder := e.served(ip)
		l := e.lock(ip)
		assert.Equal(t, l.Annotations[lease.AnnotationIP], ip.String())
		assert.Equal(t, l.Annotations[lease.AnnotationServices], "default/web")
		assert.Equal(t, l.Labels[lease.ManagedByLabel], lease.ManagedBy)
		names[l.Name] = true
		t.Logf("%s held by %s", ip, holder)
	}
	assert.Equal(t, len(names), len(ips), "one lock per IP")
}

// 2a. The holder's eipd is SIGKILLed: its address expires on that node
// before a survivor binds it, and the IP answers again from the survivor.
func TestKilledHolderFailsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(10)
	e.service("web", ip)
	old := e.served(ip)
	p := e.probe(ip)
	e.answersFrom(p, old)

	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	killed := time.Now()
	next := e.takenOver(ip, old, p)
	r := p.Stop()
	e.noTwoMACs(r)
	t.Logf("failover after SIGKILL: answered by %s %s after the kill", next, firstReplyFrom(r, e.mac(next), killed))
	assert.DeepEqual(t, e.boundOn(ip), []string{next})
}

// 2b and 4. The holder's link is cut: it unbinds itself, a survivor takes
// over, and when the link returns there is still exactly one holder.
func TestPartitionedHolderFailsOverAndStaysSingle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(20)
	e.service("web", ip)
	old := e.served(ip)
	p := e.probe(ip)
	e.answersFrom(p, old)

	e.must(e.c.CutLink(e.ctx, old))
	cut := time.Now()
	e.eventually(old+" unbinds on losing carrier", func() (bool, string) {
		return !slices.Contains(e.boundOn(ip), old), fmt.Sprint(e.boundOn(ip))
	})
	next := e.takenOver(ip, old, p)
	t.Logf("failover after link cut: %s", firstReplyFrom(p.Result(), e.mac(next), cut))

	e.must(e.c.RestoreLink(e.ctx, old))
	// The returning node must see the new holder and take nothing back.
	e.eventually(old+" renews again", func() (bool, string) {
		l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(old), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return time.Since(l.Spec.RenewTime.Time) < time.Second, "renewed at " + l.Spec.RenewTime.String()
	})
	assert.Equal(t, e.served(ip), next)
	r := p.Stop()
	e.noTwoMACs(r)
}

// 3. SIGTERM hands the IPs to a peer with no interval of two MACs.
func TestGracefulStopHandsOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(30)
	e.service("web", ip)
	old := e.served(ip)
	p := e.probe(ip)
	e.answersFrom(p, old)

	e.must(e.c.StopDaemon(old, syscall.SIGTERM))
	assert.Assert(t, !e.c.DaemonRunning(old))
	next := e.served(ip)
	assert.Assert(t, next != old)
	e.answersFrom(p, next)
	r := p.Stop()
	e.noTwoMACs(r)
	_, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(old), metav1.GetOptions{})
	assert.Assert(t, err != nil, "the stopped node's heartbeat is deleted")
	assert.Assert(t, e.lock(ip).Spec.LeaseTransitions != nil && *e.lock(ip).Spec.LeaseTransitions >= 1)
}

// 5. All daemons stopped: nothing is purged; one returning serves again.
func TestAllDaemonsStoppedThenOneReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ips := []netip.Addr{testenv.ServiceIP(40), testenv.ServiceIP(41)}
	e.service("web", ips...)
	for _, ip := range ips {
		e.served(ip)
	}
	for _, n := range e.nodes {
		e.must(e.c.StopDaemon(n, syscall.SIGTERM))
	}
	for _, ip := range ips {
		assert.Assert(t, e.lock(ip) != nil, "lock of %s kept", ip)
		assert.DeepEqual(t, e.boundOn(ip), []string(nil))
	}
	e.start(e.nodes[1])
	for _, ip := range ips {
		assert.Equal(t, e.served(ip), e.nodes[1])
	}
}

// 6. A deleted Service's IPs are unbound everywhere and their locks
// deleted; a Service created while every daemon is down is served once
// they start.
func TestServiceDeletedAndCreatedWhileDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(50)
	e.service("web", ip)
	e.served(ip)
	e.deleteService("web")
	e.eventually("lock deleted and address gone", func() (bool, string) {
		return e.lock(ip) == nil && len(e.boundOn(ip)) == 0, fmt.Sprintf("bound on %v", e.boundOn(ip))
	})

	for _, n := range e.nodes {
		e.must(e.c.StopDaemon(n, syscall.SIGKILL))
	}
	ip2 := testenv.ServiceIP(51)
	e.service("late", ip2)
	for _, n := range e.nodes {
		e.start(n)
	}
	e.served(ip2)
}

// 7. An address removed by hand comes back at once, and so does eipd's
// device deleted by hand, with its addresses; both count as held addresses
// that vanished.
func TestAddressRemovedByHandIsRestored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(60)
	e.service("web", ip)
	holder := e.served(ip)
	_, err := e.c.Exec(e.ctx, holder, "ip", "addr", "del", ip.String()+"/32", "dev", testenv.EipdDevice)
	assert.NilError(t, err)
	removed := time.Now()
	e.eventually("address restored", func() (bool, string) {
		return slices.Contains(e.boundOn(ip), holder), fmt.Sprint(e.boundOn(ip))
	})
	t.Logf("restored within %s", time.Since(removed))
	assert.Equal(t, e.served(ip), holder)

	_, err = e.c.Exec(e.ctx, holder, "ip", "link", "del", testenv.EipdDevice)
	assert.NilError(t, err)
	removed = time.Now()
	e.eventually("device and address restored", func() (bool, string) {
		return slices.Contains(e.boundOn(ip), holder), fmt.Sprint(e.boundOn(ip))
	})
	t.Logf("restored within %s", time.Since(removed))
	assert.Equal(t, e.served(ip), holder)
	assert.Equal(t, e.scrape(holder).samples["eip_held_addresses_vanished_total"], 2.0)
}

// 8. ConfigMap edits of netmask and interface move the addresses; an
// invalid edit changes nothing and records a Warning event.
func TestConfigEditsApplyLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	for _, n := range e.nodes {
		_, err := e.c.Exec(e.ctx, n, "sh", "-c", "ip link add eip0 type veth peer name eip0p && ip link set eip0p up && ip link set eip0 up")
		assert.NilError(t, err)
	}
	ip := testenv.ServiceIP(70)
	e.service("web", ip)
	holder := e.served(ip)

	cfg := defaultConfig()
	cfg["netmask"] = "24"
	e.setConfig(cfg)
	e.eventually("prefix becomes /24", func() (bool, string) {
		a := e.testAddrs(holder)
		return len(a) == 1 && a[0] == netip.PrefixFrom(ip, 24), fmt.Sprint(a)
	})
	assert.Equal(t, e.holder(ip), holder, "the lock did not move")

	cfg["iface"] = "eip0"
	e.setConfig(cfg)
	e.eventually("address moves to eip0", func() (bool, string) {
		out, err := e.c.Exec(e.ctx, holder, "ip", "-o", "addr", "show", "dev", "eip0")
		if err != nil {
			return false, err.Error()
		}
		eth0, _ := e.c.NodeHasAddr(holder, ip)
		return strings.Contains(string(out), ip.String()+"/24") && !eth0, string(out)
	})
	assert.Equal(t, e.holder(ip), holder, "the lock did not move")

	bad := defaultConfig()
	bad["iface"] = "eip0"
	bad["netmask"] = "24"
	bad["renew-interval"] = "5s"
	e.setConfig(bad)
	e.eventually("Warning event on the ConfigMap", func() (bool, string) {
		evs := e.events("ConfigMap", testenv.ConfigMap, "InvalidConfig")
		for _, ev := range evs {
			if strings.Contains(ev.Message, "renew-interval") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d InvalidConfig events", len(evs))
	})
	out, err := e.c.Exec(e.ctx, holder, "ip", "-o", "addr", "show", "dev", "eip0")
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(string(out), ip.String()+"/24"), "the last good configuration stays: %s", out)
	e.eventually("the heartbeat reports the error", func() (bool, string) {
		hb, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(holder), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(hb.Annotations[lease.AnnotationError], "renew-interval"), fmt.Sprint(hb.Annotations)
	})
}

// 9. A node restarted with stale addresses removes what it does not hold.
func TestRestartRemovesStaleAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(80)
	e.service("web", ip)
	holder := e.served(ip)
	other := e.other(holder)
	stale := testenv.ServiceIP(81)
	e.must(e.c.StopDaemon(other, syscall.SIGKILL))
	_, err := e.c.Exec(e.ctx, other, "ip", "addr", "add", stale.String()+"/32", "dev", "eth0")
	assert.NilError(t, err)
	assert.DeepEqual(t, e.boundOn(stale), []string{other})
	e.start(other)
	e.eventually("stale address removed", func() (bool, string) {
		return len(e.boundOn(stale)) == 0, fmt.Sprint(e.boundOn(stale))
	})
	assert.Equal(t, e.served(ip), holder)
}

// 10. One IP named by two Services is one lock and one binding; deleting
// one Service keeps the IP.
func TestSharedIPIsOneLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(90)
	e.service("a", ip)
	e.service("b", ip)
	holder := e.served(ip)
	list, err := e.k.CoordinationV1().Leases(testenv.Namespace).List(e.ctx, metav1.ListOptions{LabelSelector: lease.RoleLabel + "=" + lease.RoleLock})
	assert.NilError(t, err)
	assert.Equal(t, len(list.Items), 1)
	e.deleteService("a")
	e.eventually("still served after one Service is deleted", func() (bool, string) {
		return e.lock(ip) != nil, "lock gone"
	})
	assert.Equal(t, e.served(ip), holder)
}

// failoverBound is how long after its holder is lost an IP may take to be
// answered by a survivor in the tests that bound it: three lease
// durations, a generous multiple of the ≈ 2 s a failover takes, so that a
// loaded machine stays inside it, while a failover the mechanism under
// test delays (dead nodes' replayed datagrams kept one alive 14 s) fails.
const failoverBound = 3 * leaseDuration

// answeredWithin fails the test unless the probe heard node's MAC within
// bound after t, and logs when it did.
func (e *env) answeredWithin(r testenv.ProbeResult, node string, t time.Time, bound time.Duration, what string) {
	e.t.Helper()
	for _, rep := range r.Replies {
		if rep.At.After(t) && bytes.Equal(rep.MAC, e.mac(node)) {
			took := rep.At.Sub(t)
			e.t.Logf("%s: %s answered %s after it", what, node, took.Round(time.Millisecond))
			if took > bound {
				e.t.Errorf("%s: %s answered %s after it, more than %s", what, node, took.Round(time.Millisecond), bound)
			}
			return
		}
	}
	e.t.Errorf("%s: %s never answered", what, node)
}

// firstReplyFrom describes when the probe first heard mac after t.
func firstReplyFrom(r testenv.ProbeResult, mac []byte, t time.Time) string {
	for _, rep := range r.Replies {
		if rep.At.After(t) && string(rep.MAC) == string(mac) {
			return rep.At.Sub(t).Round(time.Millisecond).String()
		}
	}
	return "never"
}
