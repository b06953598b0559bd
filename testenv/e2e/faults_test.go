package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Fault tests (issue 8): what a client on the LAN sees while the control
// plane, a node's path to it or a node's link fails, while eipd crashes,
// and while its inputs are edited by hand. Each test pings its IPs every
// 10 ms from the client namespace, samples where the addresses are bound,
// and compares the locks before and after. Lines starting "CLIENT VIEW"
// are the numbers docs/faults.md quotes.

// The defaults of eip-config, which these tests do not change.
const (
	leaseDuration = 2 * time.Second
	renewInterval = 500 * time.Millisecond
	fenceAfter    = 1500 * time.Millisecond // 0.75 × lease-duration
)

func serviceIPs(first, n int) []netip.Addr {
	var ips []netip.Addr
	for i := range n {
		ips = append(ips, testenv.ServiceIP(first+i))
	}
	return ips
}

// 1a. kube-apiserver stopped for 60 s with api-loss=hold: every IP keeps
// answering from its holder throughout, and nothing moves after the API
// server returns, because every observer grants its peers a fresh lease
// duration when its own watch resumes. The stop is graceful (SIGTERM): the
// API server stops listening at once but keeps the daemons' open
// connections hanging until it exits (here it waits out its 30 s grace
// with eipd's watches open and is then killed). Two of the IPs are in a
// route-mode range: their routes stay at the router and the routed client
// keeps being answered through their holders (one outage for both modes).
func TestFaultAPIServerStoppedHold(t *testing.T) {
	t.Parallel()
	longFault(t)
	e := newRouteEnv(t, "api-loss", "hold")
	e.guardAPIServer()
	st := e.startPointVia(e.onLAN(serviceIPs(101, 3)...), e.throughRouter(testenv.RoutedServiceIP(70), testenv.RoutedServiceIP(71)))
	e.holdThrough("kube-apiserver", st, 60*time.Second,
		func() error { return e.c.StopAPIServer(syscall.SIGTERM) },
		func() error { return e.c.StartAPIServer(e.ctx) })
}

// 1b. etcd killed for 20 s with api-loss=hold: the API server stays up but
// fails every write and its watches go silent; the same must hold.
func TestFaultEtcdStoppedHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.guardEtcd()
	e.holdThrough("etcd", e.startPoint(serviceIPs(109, 3)...), 20*time.Second,
		func() error { return e.c.StopEtcd(syscall.SIGKILL) },
		func() error { return e.c.StartEtcd(e.ctx) })
}

// holdThrough runs one outage of the control plane under api-loss=hold,
// from st.
func (e *env) holdThrough(what string, st startPoint, outage time.Duration, stop, start func() error) {
	e.t.Helper()
	ips := slices.Collect(maps.Keys(st.holders))

	stopped, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		stopped <- stop()
	}()
	// When a check fails, the guard's cleanup starts it again: only once
	// the stop has finished, or the start finds it "already running" and
	// the tests after this one find it gone.
	e.t.Cleanup(func() { <-done })
	e.throughout(what+" down: every IP answers from its holder", outage, st.answering)
	if err := <-stopped; err != nil {
		// A graceful stop that had to be finished with SIGKILL still stopped.
		e.t.Logf("stop %s: %v", what, err)
	}
	began := time.Now()
	e.must(start())
	e.t.Logf("%s back after %s (start took %s)", what, outage, time.Since(began).Round(time.Millisecond))
	e.heartbeatsFresh(e.nodes...)
	e.t.Logf("every heartbeat renewed %s after the start", time.Since(began).Round(time.Millisecond))
	// Three lease durations: any peer wrongly judged dead would be taken
	// over within that.
	e.throughout(what+" back: nothing moves", 3*leaseDuration, st.answering)

	e.assertNothingMoved(st.before, e.lockStates(ips...))
	for ip, p := range st.probes {
		r := p.Stop()
		e.clientView(what+" stopped "+outage.String()+" (hold)", r)
		e.noTwoMACs(r)
		assert.Check(e.t, len(r.MACs()) == 1, "%s answered by %v", ip, r.MACs())
		assert.Check(e.t, r.Lost() <= r.Sent/100, "%s: %d of %d requests lost", ip, r.Lost(), r.Sent)
	}
	for ip, r := range st.w.report() {
		e.t.Log(r)
		assert.Check(e.t, len(r.double) == 0 && len(r.unbound) == 0, "%s", r)
		assert.Check(e.t, slices.Equal(r.holders, []string{st.holders[ip]}), "%s", r)
	}
	for _, n := range e.nodes {
		assert.Check(e.t, strings.Contains(e.logSince(st.mark, n), "heartbeat renewal failed; holding what is bound"), "%s did not log the outage", n)
	}
}

// 1c. kube-apiserver killed for 10 s with api-loss=fence: every node
// unbinds within fence-after of its last successful renewal, and after the
// API server returns each IP is bound again by the same node.
func TestFaultAPIServerStoppedFence(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["api-loss"] = "fence"
	e := newEnv(t, cfg)
	e.guardAPIServer()
	ips := serviceIPs(105, 3)
	st := e.startPoint(ips...)

	stopping := time.Now()
	e.must(e.c.StopAPIServer(syscall.SIGKILL))
	e.t.Logf("kube-apiserver stopped in %s", time.Since(stopping).Round(time.Millisecond))
	const outage = 10 * time.Second
	e.eventually("every IP unbound", func() (bool, string) {
		for _, ip := range ips {
			if on := e.boundOn(ip); len(on) > 0 {
				return false, fmt.Sprintf("%s still bound on %v", ip, on)
			}
		}
		return true, ""
	})
	e.throughout("API server down: nothing bound anywhere", outage-time.Since(stopping), func() string {
		for _, ip := range ips {
			if on := e.boundOn(ip); len(on) > 0 {
				return fmt.Sprintf("%s bound on %v while fenced", ip, on)
			}
		}
		return ""
	})
	starting := time.Now()
	e.must(e.c.StartAPIServer(e.ctx))
	ready := time.Now()
	e.t.Logf("kube-apiserver ready %s after its start", ready.Sub(starting).Round(time.Millisecond))
	for _, ip := range ips {
		assert.Equal(e.t, e.served(ip), st.holders[ip], "%s bound again on its holder", ip)
		e.answersFrom(st.probes[ip], st.holders[ip])
	}
	// The informers try the API server again every 250 ms and relist; the
	// barrier waits for one renewal to come back through the watch.
	back := time.Since(ready)
	e.t.Logf("every IP answering again %s after the API server was ready", back.Round(time.Millisecond))
	e.assertNothingMoved(st.before, e.lockStates(ips...))

	reports := st.w.report()
	for ip, p := range st.probes {
		r := p.Stop()
		e.clientView("kube-apiserver stopped "+outage.String()+" (fence)", r)
		e.noTwoMACs(r)
		assert.Check(e.t, len(r.MACs()) == 1, "%s answered by %v", ip, r.MACs())
		rep := reports[ip]
		e.t.Log(rep)
		assert.Check(e.t, len(rep.double) == 0, "%s", rep)
		assert.Assert(e.t, len(rep.unbound) > 0, "%s", rep)
		// The last successful renewal was sent before the stop began.
		fenced := rep.unbound[0].from.Sub(stopping)
		// How soon is a figure for docs/faults.md, not an assertion: the
		// deadline itself is checked on a fake clock (internal/lease TestFenced).
		e.t.Logf("%s unbound by %s %s after the API server began to stop (fence-after %s)", ip, st.holders[ip], fenced.Round(time.Millisecond), fenceAfter)
	}
	for _, n := range slices.Compact(slices.Sorted(maps.Values(st.holders))) {
		assert.Check(e.t, strings.Contains(e.logSince(st.mark, n), "fencing"), "%s did not log fencing", n)
	}
	// No Fenced Event is asserted here: client-go's recorder retries while
	// the API server is away, but a restarted API server refuses requests
	// as forbidden until its RBAC caches fill, and the recorder drops an
	// Event refused so. The partition test below, whose API server stays
	// up, asserts the Event.
}

// 2. The holder loses only its path to the API server; its LAN link stays
// up. With liveness over the LAN (the default) its peers still hear it:
// it keeps serving, nobody takes over, and nothing moves when its API path
// returns.
func TestFaultHolderLosesAPIServerOnlyLAN(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(116)
	st := e.startPoint(ip)
	old := st.holders[ip]

	unblock := e.blockAPI(old)
	e.throughout(old+" cut off the API server: still heard on the LAN, nothing moves", 4*leaseDuration,
		e.stillAnswering(st.probes, st.holders, time.Second))
	e.logged(st.mark, old, "heartbeat renewal failed; holding what is bound")
	unblock()
	e.heartbeatsFresh(e.nodes...)
	e.throughout(old+" back on the API: nothing moves", 2*leaseDuration, e.stillAnswering(st.probes, st.holders, time.Second))
	e.assertNothingMoved(st.before, e.lockStates(ip))
	r := st.probes[ip].Stop()
	e.clientView("holder "+old+" cut off the API server (LAN liveness)", r)
	e.noTwoMACs(r)
	assert.Check(t, r.Lost() <= r.Sent/100, "%d of %d requests lost", r.Lost(), r.Sent)
	rep := st.w.report()[ip]
	assert.Check(t, len(rep.double) == 0 && len(rep.unbound) == 0, "%s", rep)
}

// 2a. The same with liveness-port off: a survivor takes the IP over once
// the holder's heartbeat has not changed for a lease duration, and the old
// holder, which cannot renew, unbinds as soon as it hears the survivor's
// gratuitous ARP. When its API path returns it takes nothing back.
func TestFaultHolderLosesAPIServerOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, heartbeatsConfig())
	ip := testenv.ServiceIP(113)
	st := e.startPoint(ip)
	old, p, w, mark := st.holders[ip], st.probes[ip], st.w, st.mark

	unblock := e.blockAPI(old)
	blocked := time.Now()
	next := e.takenOver(ip, old, p)
	e.logged(mark, old, "another node claimed an address we hold", "ip="+ip.String())
	e.eventually(old+" unbound "+ip.String(), func() (bool, string) {
		has, err := e.c.NodeHasAddr(old, ip)
		return err == nil && !has, fmt.Sprint(has, err)
	})
	e.t.Logf("failover without the API: %s answered %s after the block", next, firstReplyFrom(p.Result(), e.mac(next), blocked))

	unblock()
	e.heartbeatsFresh(e.nodes...)
	e.throughout(old+" back on the API: takes nothing back", 3*leaseDuration,
		e.stillAnswering(map[netip.Addr]*testenv.Probe{ip: p}, map[netip.Addr]string{ip: next}, time.Second))
	assert.Equal(t, e.holder(ip), next)
	assert.DeepEqual(t, e.boundOn(ip), []string{next})

	r := p.Stop()
	gap := e.clientView("holder "+old+" cut off the API server", r)
	e.atMostOneProbeOfTwoMACs(r)
	assert.Check(t, gap < leaseDuration+2*time.Second, "longest gap %s", gap)
	rep := w.report()[ip]
	t.Log(rep)
	for _, d := range rep.double {
		// The new holder announces within milliseconds of binding and the
		// old one unbinds on hearing it.
		assert.Check(t, d.to.Sub(d.from) < 500*time.Millisecond, "bound on two nodes %s", d)
	}
}

// 2b. The same partition with api-loss=fence: the old holder unbinds
// within fence-after of its last successful renewal, before any peer may
// judge it dead, so the address is never bound on two nodes; the client
// sees a gap of about lease-duration − fence-after instead of none.
func TestFaultHolderLosesAPIServerOnlyFence(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["api-loss"] = "fence"
	e := newEnv(t, cfg)
	ip := testenv.ServiceIP(114)
	st := e.startPoint(ip)
	old, p, w, mark := st.holders[ip], st.probes[ip], st.w, st.mark

	unblock := e.blockAPI(old)
	blocked := time.Now()
	next := e.takenOver(ip, old, p)
	unblock()
	e.heartbeatsFresh(e.nodes...)
	e.throughout(old+" back on the API: takes nothing back", 2*leaseDuration,
		e.stillAnswering(map[netip.Addr]*testenv.Probe{ip: p}, map[netip.Addr]string{ip: next}, time.Second))

	r := p.Stop()
	e.clientView("holder "+old+" cut off the API server (fence)", r)
	e.noTwoMACs(r)
	rep := w.report()[ip]
	t.Log(rep)
	assert.Check(t, len(rep.double) == 0, "%s", rep)
	assert.Assert(t, len(rep.unbound) > 0, "%s", rep)
	fenced := rep.unbound[0].from.Sub(blocked)
	margin := rep.unbound[0].to.Sub(rep.unbound[0].from)
	t.Logf("%s fenced %s after the block; %s bound it %s later", old, fenced.Round(time.Millisecond), next, margin.Round(time.Millisecond))
	// Fencing, not the survivor's announcement, unbound it: the old holder
	// says so, and it was gone before the survivor bound the IP (by about
	// lease-duration − fence-after; how long is a figure, not asserted).
	e.logged(mark, old, "fencing")
	assert.Check(t, margin > 0, "unbound only %s before %s bound it", margin, next)
	e.warningSince("Service", "web", "Fenced", blocked, "unbound "+ip.String()+" from "+old)
}

// 3. The holder's link loses carrier: it unbinds at once, a survivor takes
// over, and when the link returns the old holder answers for nothing: the
// client's neighbour cache keeps the survivor's MAC.
func TestFaultHolderLinkLosesCarrier(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(115)
	st := e.startPoint(ip)
	old, p, w := st.holders[ip], st.probes[ip], st.w

	e.cutLink(old)
	cut := time.Now()
	e.eventually(old+" unbinds on losing carrier", func() (bool, string) {
		has, err := e.c.NodeHasAddr(old, ip)
		return err == nil && !has, fmt.Sprint(has, err)
	})
	next := e.takenOver(ip, old, p)
	t.Logf("failover after carrier loss: %s answered %s after the cut", next, firstReplyFrom(p.Result(), e.mac(next), cut))

	e.must(e.c.RestoreLink(e.ctx, old))
	nextMAC := e.mac(next)
	e.throughout(old+"'s link back: the client still sends to "+next, 3*leaseDuration, func() string {
		if has, _ := e.c.NodeHasAddr(old, ip); has {
			return old + " bound " + ip.String() + " again"
		}
		neigh, err := e.c.ClientNeigh()
		if err != nil {
			return err.Error()
		}
		for _, n := range neigh {
			if n.IP == ip && len(n.MAC) > 0 && !bytes.Equal(n.MAC, nextMAC) {
				return fmt.Sprintf("client's neighbour cache: %s at %s (%s), want %s", ip, n.MAC, n.State, nextMAC)
			}
		}
		return e.stillAnswering(map[netip.Addr]*testenv.Probe{ip: p}, map[netip.Addr]string{ip: next}, time.Second)()
	})
	e.heartbeatsFresh(e.nodes...)
	macs, err := e.c.WhoAnswers(ip)
	assert.NilError(t, err)
	assert.DeepEqual(t, macs, []net.HardwareAddr{nextMAC})
	assert.Equal(t, e.holder(ip), next)

	r := p.Stop()
	gap := e.clientView("holder "+old+" lost carrier", r)
	e.noTwoMACs(r)
	assert.Check(t, gap < leaseDuration+2*time.Second, "longest gap %s", gap)
	rep := w.report()[ip]
	t.Log(rep)
	assert.Check(t, len(rep.double) == 0, "%s", rep)
	if len(rep.unbound) > 0 {
		t.Logf("%s unbound %s after the cut", old, rep.unbound[0].from.Sub(cut).Round(time.Millisecond))
		assert.Check(t, rep.unbound[0].from.Sub(cut) < 500*time.Millisecond, "%s", rep)
	}
}

// 6. A slow API server (200 ms added to every frame the control plane
// sends) causes no failover at the default timings.
func TestFaultSlowAPIServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ips := serviceIPs(134, 3)
	st := e.startPoint(ips...)

	const delay = 200 * time.Millisecond
	e.must(e.c.AddLatency(e.ctx, testenv.ControlPlane, delay))
	e.t.Cleanup(func() { _ = e.c.AddLatency(e.ctx, testenv.ControlPlane, 0) })
	e.throughout("API server 200 ms away: every IP answers from its holder", 20*time.Second, e.stillAnswering(st.probes, st.holders, time.Second))
	e.must(e.c.AddLatency(e.ctx, testenv.ControlPlane, 0))
	e.heartbeatsFresh(e.nodes...)
	e.assertNothingMoved(st.before, e.lockStates(ips...))

	for ip, p := range st.probes {
		r := p.Stop()
		e.clientView("API server 200 ms slower for 20 s", r)
		e.noTwoMACs(r)
		assert.Check(t, len(r.MACs()) == 1, "%s answered by %v", ip, r.MACs())
		assert.Check(t, r.Lost() <= r.Sent/100, "%s: %d of %d requests lost", ip, r.Lost(), r.Sent)
	}
	for _, r := range st.w.report() {
		t.Log(r)
		assert.Check(t, len(r.double) == 0 && len(r.unbound) == 0, "%s", r)
	}
	for _, n := range e.nodes {
		log := e.logSince(st.mark, n)
		t.Logf("%s: %d failed renewals logged", n, strings.Count(log, "heartbeat renewal failed"))
		assert.Check(t, !strings.Contains(log, "took over from a dead holder"), "%s took over", n)
	}
}

// editLock changes a lock by hand, as an operator with kubectl edit would.
func (e *env) editLock(ip netip.Addr, edit func(*coordinationv1.Lease)) {
	e.t.Helper()
	leases := e.k.CoordinationV1().Leases(testenv.Namespace)
	e.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(e.ctx, lease.NameFor(ip), metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(l)
		_, err = leases.Update(e.ctx, l, metav1.UpdateOptions{})
		return err
	}))
}

// 4. eipd crash-loops on one node: SIGKILLed three seconds after every
// start and restarted the way the kubelet restarts a crash-looping
// container (at once, then after a growing back-off: 1 s, 2 s, 4 s with
// the kubelet's newer, shorter back-off; 10 s and more with the default).
// While a restart comes within the lease duration the node never looks
// dead and rebinds what it holds (the client sees a few hundred ms per
// crash); once an outage outlasts it, the IPs move to the healthy nodes,
// and under sticky no later restart takes them back.
func TestFaultCrashLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ips := serviceIPs(117, 6)
	e.service("web", ips...)
	holders := e.servedAll(ips...)
	victim := holders[ips[0]]
	var victims []netip.Addr
	for _, ip := range ips {
		if holders[ip] == victim {
			victims = append(victims, ip)
		}
	}
	probes := e.probeAll(ips...)
	healthy := map[netip.Addr]*testenv.Probe{}
	for ip, p := range probes {
		if holders[ip] != victim {
			healthy[ip] = p
		}
	}
	// Whatever the victim does, the others' IPs keep answering.
	others := e.stillAnswering(healthy, holders, time.Second)
	w := e.watchBindings(ips...)
	mark := e.markLogs()

	for i, backoff := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 0} {
		e.must(e.c.StopDaemon(victim, syscall.SIGKILL))
		killed := time.Now()
		if backoff > 0 {
			e.throughout(fmt.Sprintf("crash %d of %s: back-off", i+1, victim), backoff, others)
		}
		e.start(victim)
		e.throughout(fmt.Sprintf("crash %d of %s: running", i+1, victim), 3*time.Second, others)
		var moved []string
		for _, ip := range victims {
			if h := e.holder(ip); h != victim {
				moved = append(moved, ip.String()+"→"+h)
			}
		}
		t.Logf("crash %d, restarted after %s: %d s later %d of %d IPs of %s moved %v", i+1, backoff,
			int(time.Since(killed).Seconds()), len(moved), len(victims), victim, moved)
	}
	settled := e.lockStates(ips...)
	now := map[netip.Addr]string{}
	for ip, st := range settled {
		now[ip] = st.Holder
	}
	e.throughout("after the crash loop: nothing moves", 3*leaseDuration, e.stillAnswering(probes, now, time.Second))
	e.assertNothingMoved(settled, e.lockStates(ips...))
	for ip, s := range settled {
		assert.Check(t, s.Holder != victim, "%s still on the crash-looping %s", ip, victim)
		assert.Check(t, s.Transitions <= 1, "%s moved %d times", ip, s.Transitions)
	}
	for _, ip := range ips {
		r := probes[ip].Stop()
		e.clientView("eipd on "+victim+" crash-looping", r)
		e.atMostOneProbeOfTwoMACs(r)
		if holders[ip] != victim {
			assert.Check(t, r.Lost() <= r.Sent/100, "%s, not on %s: %d of %d requests lost", ip, victim, r.Lost(), r.Sent)
		}
	}
	for _, r := range w.report() {
		t.Log(r)
		assert.Check(t, len(r.double) == 0, "%s", r)
	}
	t.Logf("%s logged %d starts", victim, e.countLines(mark, victim, "starting eipd"))
}

// 5a. A daemon restarted under a node name that has no Node object: it
// says so (log, heartbeat), binds nothing, and the IPs it held move to
// the others. Restarted under its right name it serves again and takes
// nothing back; the stray heartbeat is collected.
func TestFaultDaemonRestartedUnderUnknownNodeName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.killDaemonsOnCleanup()
	ip := testenv.ServiceIP(124)
	e.service("web", ip)
	old := e.served(ip)
	p := e.probe(ip)
	w := e.watchBindings(ip)
	mark := e.markLogs()

	const stray = "node-typo"
	e.must(e.c.StopDaemon(old, syscall.SIGTERM))
	e.must(e.c.StartDaemon(old, "--node-name="+stray))
	e.eventually("heartbeat of "+stray+" says why", func() (bool, string) {
		hb := e.heartbeat(stray)
		return hb != nil && hb[lease.AnnotationEligible] == "false" && strings.Contains(hb[lease.AnnotationError], "no Node object"), fmt.Sprint(hb)
	})
	e.logged(mark, old, "not eligible", "no Node object")
	next := e.served(ip)
	assert.Assert(t, next != old)
	e.throughout(old+" as "+stray+": binds nothing", 2*leaseDuration, func() string {
		if a := e.testAddrs(old); len(a) > 0 {
			return fmt.Sprint(a)
		}
		return ""
	})

	e.must(e.c.StopDaemon(old, syscall.SIGTERM))
	e.start(old)
	e.eventually("the stray heartbeat is collected", func() (bool, string) {
		return e.heartbeat(stray) == nil, "still there"
	})
	assert.Equal(t, e.served(ip), next, "the returning node takes nothing back")
	r := p.Stop()
	e.clientView("eipd restarted as "+stray, r)
	e.noTwoMACs(r)
	rep := w.report()[ip]
	t.Log(rep)
	assert.Check(t, len(rep.double) == 0, "%s", rep)
}

// 5b. A daemon restarted under the name of another node whose daemon runs
// (a wrong --node-name): two processes would claim one identity and bind
// that node's IPs from two MACs. eipd refuses to start when none of the
// Node's addresses is on its host, and says why.
func TestFaultDaemonRestartedUnderAnotherNodesName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.killDaemonsOnCleanup()
	ips := serviceIPs(140, 4)
	e.service("web", ips...)
	holders := e.servedAll(ips...)
	twin := holders[ips[0]]
	impostor := e.other(twin)
	e.heartbeatsFresh(e.nodes...)
	before := e.lockStates(ips...)
	probes := e.probeAll(ips...)
	w := e.watchBindings(ips...)
	mark := e.markLogs()

	e.must(e.c.StopDaemon(impostor, syscall.SIGTERM))
	e.must(e.c.StartDaemon(impostor, "--node-name="+twin))
	line := e.logged(mark, impostor, "none of its addresses", "is on this host", "names another node")
	t.Logf("%s as %s: %s", impostor, twin, line)
	e.eventually(impostor+"'s daemon exits", func() (bool, string) {
		return !e.c.DaemonRunning(impostor), "still running"
	})
	e.start(impostor)
	e.throughout(impostor+" back under its own name", 2*leaseDuration, func() string {
		for _, ip := range ips {
			if on := e.boundOn(ip); len(on) > 1 {
				return fmt.Sprintf("%s bound on %v", ip, on)
			}
		}
		return ""
	})
	for _, ip := range ips {
		if holders[ip] == twin {
			assert.Equal(t, e.served(ip), twin, "%s stays on %s", ip, twin)
			assert.DeepEqual(t, e.lockStates(ip)[ip], before[ip])
		}
	}
	for _, ip := range ips {
		r := probes[ip].Stop()
		e.clientView(impostor+" restarted as "+twin, r)
		e.atMostOneProbeOfTwoMACs(r)
	}
	for _, r := range w.report() {
		t.Log(r)
		assert.Check(t, len(r.double) == 0, "%s", r)
	}
}

// 5c. A node's heartbeat Lease deleted by hand: the node writes it again at
// its next renewal, and its peers, which never saw it stop changing for a
// lease duration, take nothing over.
func TestFaultHeartbeatDeletedByHand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(126)
	st := e.startPoint(ip)
	holder, before, p, w, mark := st.holders[ip], st.before, st.probes[ip], st.w, st.mark

	e.must(e.k.CoordinationV1().Leases(testenv.Namespace).Delete(e.ctx, lease.HeartbeatName(holder), metav1.DeleteOptions{}))
	e.eventually("the heartbeat is written again", func() (bool, string) {
		return e.heartbeat(holder) != nil, "not yet"
	})
	e.throughout("after the deletion: nothing moves", 3*leaseDuration,
		e.stillAnswering(map[netip.Addr]*testenv.Probe{ip: p}, map[netip.Addr]string{ip: holder}, time.Second))
	e.assertNothingMoved(before, e.lockStates(ip))
	r := p.Stop()
	e.clientView("heartbeat of "+holder+" deleted", r)
	e.noTwoMACs(r)
	rep := w.report()[ip]
	t.Log(rep)
	assert.Check(t, len(rep.double) == 0 && len(rep.unbound) == 0, "%s", rep)
	t.Logf("%s logged: %s", holder, e.logged(mark, holder, "heartbeat Lease was deleted or changed by someone else; writing it again"))
}

// 5d. A lock edited by hand to name a node that does not exist: its holder
// unbinds, since the lock no longer names it; the IP, whose holder has no
// heartbeat, is taken by the best-ranked live node, which repairs the lock.
func TestFaultLockNamesUnknownNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(128)
	st := e.startPoint(ip)
	p, w, mark := st.probes[ip], st.w, st.mark

	e.editLock(ip, func(l *coordinationv1.Lease) {
		ghost := "node-ghost"
		l.Spec.HolderIdentity = &ghost
	})
	e.eventually("a real node holds "+ip.String()+" again", func() (bool, string) {
		h := e.holder(ip)
		return slices.Contains(e.nodes, h), "holder " + h
	})
	next := e.served(ip)
	e.answersFrom(p, next)
	e.throughout("after the repair: nothing moves", 2*leaseDuration, func() string {
		if h := e.holder(ip); h != next {
			return "holder " + h
		}
		return ""
	})
	r := p.Stop()
	e.clientView("lock of "+ip.String()+" edited to name node-ghost", r)
	e.atMostOneProbeOfTwoMACs(r)
	rep := w.report()[ip]
	t.Log(rep)
	for _, d := range rep.double {
		assert.Check(t, d.to.Sub(d.from) < 100*time.Millisecond, "bound on two nodes %s", d)
	}
	for _, n := range e.nodes {
		t.Logf("%s logged about it: %q", n, grepLines(e.logSince(mark, n), ip.String()))
	}
}

// 5e. A lock's IP annotation edited to garbage, then to another IP: the
// damaged lock is reported (once per version) and its holder is still
// honoured, so nothing moves; fixing the annotation ends the warnings.
func TestFaultLockWithGarbageAnnotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(130)
	st := e.startPoint(ip)
	holder, before, p, w := st.holders[ip], st.before, st.probes[ip], st.w
	still := e.stillAnswering(map[netip.Addr]*testenv.Probe{ip: p}, map[netip.Addr]string{ip: holder}, time.Second)

	for _, bad := range []string{"not-an-ip", testenv.ServiceIP(131).String()} {
		mark := e.markLogs()
		e.editLock(ip, func(l *coordinationv1.Lease) { l.Annotations[lease.AnnotationIP] = bad })
		for _, n := range e.nodes {
			t.Logf("%s: %s", n, e.logged(mark, n, "damaged lock", "lease="+lease.NameFor(ip)))
		}
		e.throughout("damaged lock ("+bad+"): nothing moves", 2*leaseDuration, still)
		for _, n := range e.nodes {
			assert.Check(t, e.countLines(mark, n, "damaged lock") == 1, "%s warned %d times", n, e.countLines(mark, n, "damaged lock"))
		}
	}
	mark := e.markLogs()
	e.editLock(ip, func(l *coordinationv1.Lease) { l.Annotations[lease.AnnotationIP] = ip.String() })
	e.throughout("lock repaired: nothing moves", 2*leaseDuration, still)
	for _, n := range e.nodes {
		assert.Check(t, e.countLines(mark, n, "damaged lock") == 0, n)
	}
	after := e.lockStates(ip)
	e.assertNothingMoved(before, after)
	r := p.Stop()
	e.clientView("lock of "+ip.String()+" damaged by hand", r)
	e.noTwoMACs(r)
	rep := w.report()[ip]
	assert.Check(t, len(rep.double) == 0 && len(rep.unbound) == 0, "%s", rep)
}

// 5f. The ConfigMap deleted: every daemon keeps its last good
// configuration and says so (log, heartbeat); the IPs stay. A daemon that
// starts meanwhile has no configuration at all: it binds nothing and is
// not eligible, so the others hand it nothing. Recreating the ConfigMap
// ends the errors.
func TestFaultConfigMapDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.killDaemonsOnCleanup()
	ips := serviceIPs(132, 2)
	e.service("web", ips...)
	holders := e.servedAll(ips...)
	e.heartbeatsFresh(e.nodes...)
	probes := e.probeAll(ips...)
	w := e.watchBindings(ips...)
	mark := e.markLogs()

	e.must(e.k.CoreV1().ConfigMaps(testenv.Namespace).Delete(e.ctx, testenv.ConfigMap, metav1.DeleteOptions{}))
	for _, n := range e.nodes {
		e.logged(mark, n, "was deleted; keeping the last good configuration")
		e.eventually(n+" reports the deletion", func() (bool, string) {
			hb := e.heartbeat(n)
			return strings.Contains(hb[lease.AnnotationError], "was deleted"), fmt.Sprint(hb)
		})
	}
	e.throughout("ConfigMap deleted: every IP answers from its holder", 2*leaseDuration, e.stillAnswering(probes, holders, time.Second))

	// A daemon starting now finds no ConfigMap: it serves with the last
	// good configuration the others kept in the cluster, and says so.
	fresh := e.other(slices.Collect(maps.Values(holders))...)
	e.must(e.c.StopDaemon(fresh, syscall.SIGTERM))
	mark = e.markLogs()
	e.start(fresh)
	e.logged(mark, fresh, "using the last good configuration")
	e.eventually(fresh+" reports the last good configuration in force", func() (bool, string) {
		hb := e.heartbeat(fresh)
		return hb[lease.AnnotationEligible] != "false" && strings.Contains(hb[lease.AnnotationError], "using the last good configuration"), fmt.Sprint(hb)
	})
	e.throughout(fresh+" on the last good configuration", 2*leaseDuration, e.stillAnswering(probes, holders, time.Second))

	e.setConfig(defaultConfig())
	for _, n := range e.nodes {
		e.eventually(n+" reports no error", func() (bool, string) {
			hb := e.heartbeat(n)
			return hb != nil && hb[lease.AnnotationError] == "", fmt.Sprint(hb)
		})
	}
	for _, ip := range ips {
		e.served(ip)
	}
	for _, ip := range ips {
		r := probes[ip].Stop()
		e.clientView("ConfigMap deleted", r)
		e.atMostOneProbeOfTwoMACs(r)
		assert.Check(t, r.Lost() <= r.Sent/100, "%s: %d of %d requests lost", ip, r.Lost(), r.Sent)
	}
	for _, r := range w.report() {
		t.Log(r)
		assert.Check(t, len(r.double) == 0, "%s", r)
	}
}

// holdersNow reads the current holders.
func (e *env) holdersNow(ips []netip.Addr) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, ip := range ips {
		out[ip] = e.holder(ip)
	}
	return out
}

// grepLines returns the lines of log that contain s.
func grepLines(log, s string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
