package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/policy"
	"github.com/eip-project/eip/testenv"
)

// Helpers of the policy tests: where the IPs are (as the client, the
// kernel and the locks see it), what moved, and the conflicts the daemons
// counted.

const (
	// stableFor is how long a settled placement is watched for a late move
	// or a ping-pong: three lease durations of the default configuration,
	// within which any node that disagrees with the plan would act.
	stableFor = 6 * time.Second
	// handoffGapLimit bounds the client's longest gap for an IP handed off
	// (target 100 ms, measured by the benchmarks; this is a deadline on a
	// loaded 2-core machine) and for an IP that should not move at all.
	handoffGapLimit = time.Second
	// failoverGapLimit bounds the gap for an IP whose holder was killed:
	// lease duration (2 s) + the 0.5 s target, plus slack for this machine.
	failoverGapLimit = 4 * time.Second
	// zoneLabel is the Node label the node-selector test selects on.
	zoneLabel = "eip-e2e/zone"
)

// policyIPs are n consecutive test IPs from first.
func policyIPs(first, n int) []netip.Addr {
	var out []netip.Addr
	for i := range n {
		out = append(out, testenv.ServiceIP(first+i))
	}
	return out
}

// hold is one lock as the placement checks need it.
type hold struct {
	node  string
	moves int32 // leaseTransitions: every ownership change, intermediate ones too
}

// holds reads every lock of ips in one List.
func (e *env) holds(ips []netip.Addr) map[netip.Addr]hold {
	e.t.Helper()
	list, err := e.k.CoordinationV1().Leases(testenv.Namespace).List(e.ctx, metav1.ListOptions{LabelSelector: lease.RoleLabel + "=" + lease.RoleLock})
	e.must(err)
	byName := map[string]hold{}
	for _, l := range list.Items {
		var h hold
		if l.Spec.HolderIdentity != nil {
			h.node = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			h.moves = *l.Spec.LeaseTransitions
		}
		byName[l.Name] = h
	}
	out := map[netip.Addr]hold{}
	for _, ip := range ips {
		if h, ok := byName[lease.NameFor(ip)]; ok {
			out[ip] = h
		}
	}
	return out
}

// clientSees asks the LAN from the client who has each IP, all IPs at once,
// and returns the nodes whose MACs answered.
func (e *env) clientSees(ips []netip.Addr) map[netip.Addr][]string {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[netip.Addr][]string{}
	for _, ip := range ips {
		wg.Go(func() {
			macs, err := e.c.WhoAnswers(ip)
			var nodes []string
			for _, m := range macs {
				nodes = append(nodes, e.nodeOfMAC(m))
			}
			if err != nil {
				nodes = append(nodes, err.Error())
			}
			mu.Lock()
			out[ip] = nodes
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// boundNodes lists, per test IP, the nodes that have it on an interface.
func (e *env) boundNodes() map[netip.Addr][]string {
	e.t.Helper()
	out := map[netip.Addr][]string{}
	for _, n := range e.nodes {
		for _, p := range e.testAddrs(n) {
			out[p.Addr()] = append(out[p.Addr()], n)
		}
	}
	return out
}

// perNode counts the IPs each node of the cluster holds.
func (e *env) perNode(hs map[netip.Addr]hold) map[string]int {
	out := map[string]int{}
	for _, n := range e.nodes {
		out[n] = 0
	}
	for _, h := range hs {
		out[h.node]++
	}
	return out
}

// counts is a placed condition: the number of IPs per node, every node of
// the cluster listed (0 for none).
func counts(want map[string]int) func(map[string]int, map[netip.Addr]hold) string {
	return func(got map[string]int, _ map[netip.Addr]hold) string {
		for n, c := range got {
			if want[n] != c {
				return fmt.Sprintf("IPs per node %v, want %v", got, want)
			}
		}
		return ""
	}
}

// holdsNothing is a placed condition: node holds no IP.
func holdsNothing(node string) func(map[string]int, map[netip.Addr]hold) string {
	return func(got map[string]int, _ map[netip.Addr]hold) string {
		if got[node] != 0 {
			return fmt.Sprintf("%s still holds %d: %v", node, got[node], got)
		}
		return ""
	}
}

// anywhere is a placed condition that accepts any placement.
func anywhere(map[string]int, map[netip.Addr]hold) string { return "" }

// placed waits until every IP is held, bound on its holder alone and
// answered on the LAN by its holder's MAC alone, and cond accepts the
// placement. It returns the locks.
func (e *env) placed(what string, ips []netip.Addr, cond func(map[string]int, map[netip.Addr]hold) string) map[netip.Addr]hold {
	e.t.Helper()
	var hs map[netip.Addr]hold
	e.eventually(what, func() (bool, string) {
		hs = e.holds(ips)
		for _, ip := range ips {
			if hs[ip].node == "" {
				return false, ip.String() + " has no holder"
			}
		}
		if msg := cond(e.perNode(hs), hs); msg != "" {
			return false, msg
		}
		bound := e.boundNodes()
		for _, ip := range ips {
			if on := bound[ip]; len(on) != 1 || on[0] != hs[ip].node {
				return false, fmt.Sprintf("%s held by %s, bound on %v", ip, hs[ip].node, on)
			}
		}
		for ip, seen := range e.clientSees(ips) {
			if len(seen) != 1 || seen[0] != hs[ip].node {
				return false, fmt.Sprintf("%s held by %s, the client sees %v", ip, hs[ip].node, seen)
			}
		}
		return true, ""
	})
	return hs
}

// moved lists the IPs whose holder differs, in address order, and counts
// the ownership changes in between (more than the IPs moved means an IP
// moved more than once).
func moved(before, after map[netip.Addr]hold) ([]netip.Addr, int) {
	var ips []netip.Addr
	changes := 0
	for ip, a := range after {
		b := before[ip]
		if a.node != b.node {
			ips = append(ips, ip)
		}
		changes += int(a.moves - b.moves)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return ips, changes
}

// heldBy lists the IPs node holds, in address order.
func heldBy(hs map[netip.Addr]hold, node string) []netip.Addr {
	var out []netip.Addr
	for ip, h := range hs {
		if h.node == node {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// steady watches the locks and the bindings for stableFor and fails at the
// first change: no late move, no handoff ping-pong, no IP lost.
func (e *env) steady(what string, ips []netip.Addr, want map[netip.Addr]hold) {
	e.t.Helper()
	end := time.NewTimer(stableFor)
	defer end.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	for {
		got := e.holds(ips)
		if ms, changes := moved(want, got); len(ms) > 0 || changes > 0 {
			e.t.Fatalf("%s: after %s: %d IPs moved (%v), %d ownership changes", what, time.Since(began).Round(time.Millisecond), len(ms), ms, changes)
		}
		bound := e.boundNodes()
		for _, ip := range ips {
			if on := bound[ip]; len(on) != 1 || on[0] != want[ip].node {
				e.t.Fatalf("%s: after %s: %s held by %s, bound on %v", what, time.Since(began).Round(time.Millisecond), ip, want[ip].node, on)
			}
		}
		select {
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}

// clientProbes pings every IP from the client every 10 ms, and returns once
// each answers from its holder.
func (e *env) clientProbes(hs map[netip.Addr]hold) map[netip.Addr]*testenv.Probe {
	e.t.Helper()
	out := map[netip.Addr]*testenv.Probe{}
	for ip := range hs {
		out[ip] = e.probe(ip)
	}
	for ip, p := range out {
		e.answersFrom(p, hs[ip].node)
	}
	return out
}

// clientSaw waits until every probe's replies come from the IP's holder in
// after, stops the probes and checks what the client saw: never two MACs
// for one IP, an IP that moved silent for at most moveLimit, any other IP
// for at most handoffGapLimit. It returns the longest gap of a moved IP.
func (e *env) clientSaw(probes map[netip.Addr]*testenv.Probe, after map[netip.Addr]hold, movedIPs []netip.Addr, moveLimit time.Duration) time.Duration {
	e.t.Helper()
	for ip, p := range probes {
		e.answersFrom(p, after[ip].node)
	}
	var longest time.Duration
	for ip, p := range probes {
		r := p.Stop()
		if ov := r.Overlaps(); len(ov) > 0 {
			e.t.Errorf("%s: two MACs answered: %v", ip, ov)
		}
		gap := r.LongestGap().Duration()
		limit := handoffGapLimit
		if slices.Contains(movedIPs, ip) {
			limit = moveLimit
			longest = max(longest, gap)
			e.t.Logf("%s moved: %d sent, %d lost, longest gap %s", ip, r.Sent, r.Lost(), gap.Round(time.Millisecond))
		}
		if gap > limit {
			e.t.Errorf("%s: the client heard nothing for %s (limit %s): %s", ip, gap.Round(time.Millisecond), limit, r)
		}
	}
	return longest
}

// conflictMeter sums eip_lease_conflicts_total over the daemons across one
// scenario. A counter lives as long as its process, so the meter reads a
// daemon's count just before the test kills it and counts a started daemon
// from zero.
type conflictMeter struct {
	e    *env
	base map[string]float64 // running daemons: their count when metering began
	sum  float64            // from daemons stopped since
}

func (e *env) meterConflicts() *conflictMeter {
	e.t.Helper()
	m := &conflictMeter{e: e, base: map[string]float64{}}
	for _, n := range e.nodes {
		if e.c.DaemonRunning(n) {
			m.base[n] = e.conflicts(n)
		}
	}
	return m
}

// stop reads node's count, then stops its daemon with sig.
func (m *conflictMeter) stop(node string, sig syscall.Signal) {
	m.e.t.Helper()
	m.sum += m.e.conflicts(node) - m.base[node]
	delete(m.base, node)
	m.e.must(m.e.c.StopDaemon(node, sig))
}

// kill stops node's daemon with SIGKILL.
func (m *conflictMeter) kill(node string) { m.stop(node, syscall.SIGKILL) }

// start starts node's daemon and counts it from zero.
func (m *conflictMeter) start(node string) {
	m.e.t.Helper()
	m.e.start(node)
	m.base[node] = 0
}

// total is the conflicts counted since metering began.
func (m *conflictMeter) total() float64 {
	m.e.t.Helper()
	t := m.sum
	for n, b := range m.base {
		t += m.e.conflicts(n) - b
	}
	return t
}

// conflicts scrapes node's eip_lease_conflicts_total from the client
// namespace, as a Prometheus server on the LAN would.
func (e *env) conflicts(node string) float64 {
	e.t.Helper()
	var v float64
	e.eventually("eip_lease_conflicts_total of "+node, func() (bool, string) {
		got, err := scrapeCounter(e.c.ClientHTTP(), "http://"+e.c.DaemonMetricsAddr(node)+"/metrics", "eip_lease_conflicts_total")
		v = got
		return err == nil, fmt.Sprint(err)
	})
	return v
}

func scrapeCounter(c *http.Client, url, name string) (float64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	return 0, fmt.Errorf("scrape %s: no %s", url, name)
}

// editNode changes a Node, retrying on conflicts.
func (e *env) editNode(name string, edit func(*corev1.Node)) {
	e.t.Helper()
	e.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.k.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(n)
		_, err = e.k.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	}))
}

// restoreNodesOnCleanup undoes every Node edit of the policy tests when the
// test ends, so that the next test finds every node eligible.
func (e *env) restoreNodesOnCleanup() {
	e.t.Cleanup(func() {
		for _, n := range e.nodes {
			e.editNode(n, func(n *corev1.Node) {
				delete(n.Labels, policy.ExcludeLabel)
				delete(n.Labels, zoneLabel)
				n.Spec.Unschedulable = false
			})
		}
	})
}

// preferService creates a Service whose IPs prefer the given nodes.
func (e *env) preferService(name, preferred string, ips ...netip.Addr) {
	e.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: svcNamespace,
			Labels:      map[string]string{e2eLabel: "true"},
			Annotations: map[string]string{ipset.AnnotationPreferredNodes: preferred},
		},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	for _, ip := range ips {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, ip.String())
	}
	_, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, svc, metav1.CreateOptions{})
	e.must(err)
}

// renewedSince waits until node's heartbeat was renewed after t (its
// renewTime is the node's clock, which is this machine's): its peers then
// see it alive.
func (e *env) renewedSince(node string, t time.Time) {
	e.t.Helper()
	e.eventually(node+" renews its heartbeat", func() (bool, string) {
		l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(node), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(t) {
			return false, "not renewed since " + t.Format(time.StampMilli)
		}
		return l.Annotations[lease.AnnotationEligible] == "true", fmt.Sprint(l.Annotations)
	})
}

// heartbeatOf reads node's heartbeat annotations; nil without a heartbeat.
func (e *env) heartbeatOf(node string) map[string]string {
	l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(node), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l.Annotations
}

// step is what one scenario step did, as the POLICY lines report it.
type step struct {
	name      string
	moved     []netip.Addr
	changes   int
	conflicts float64
	gap       time.Duration // longest client gap of a moved IP
}

func (e *env) report(s step, before, after map[netip.Addr]hold) {
	e.t.Helper()
	var from bytes.Buffer
	for _, ip := range s.moved {
		fmt.Fprintf(&from, " %s:%s→%s", ip, before[ip].node, after[ip].node)
	}
	e.t.Logf("POLICY %s / %s: %d IPs moved, %d ownership changes, %g lease conflicts, longest client gap of a moved IP %s; per node %v → %v;%s",
		e.t.Name(), s.name, len(s.moved), s.changes, s.conflicts, s.gap.Round(time.Millisecond), e.perNode(before), e.perNode(after), from.String())
}
