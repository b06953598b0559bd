package e2e

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// What the fault tests share: a record of where addresses were bound while
// a fault lasted, invariants checked for a fixed time, lock snapshots, the
// daemons' logs, and the guards that undo a fault if a test stops early.

// longFault skips a fault test that takes a minute or more under -short.
// `make test` runs them all.
func longFault(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long fault test: skipped with -short")
	}
}

// bindingSample is where the watched IPs were bound at one moment.
type bindingSample struct {
	at time.Time
	on map[netip.Addr][]string
}

// bindWatch samples, every few milliseconds, which nodes have each watched
// IP on eth0 or eipd's device: the node's own view, which the client
// cannot see but which shows an address bound on two nodes however briefly
// the LAN or the router noticed it.
type bindWatch struct {
	e    *env
	ips  []netip.Addr
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples []bindingSample
}

// bindWatchEvery is the sampling period; six netlink dumps take about two
// milliseconds.
const bindWatchEvery = 10 * time.Millisecond

func (e *env) watchBindings(ips ...netip.Addr) *bindWatch {
	w := &bindWatch{e: e, ips: ips, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	e.t.Cleanup(w.halt)
	return w
}

func (w *bindWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(bindWatchEvery)
	defer tick.Stop()
	for {
		s := bindingSample{at: time.Now(), on: map[netip.Addr][]string{}}
		for _, n := range w.e.nodes {
			addrs, err := w.e.c.NodeAddrs(n)
			if err != nil {
				continue
			}
			for _, p := range addrs {
				if slices.Contains(w.ips, p.Addr()) {
					s.on[p.Addr()] = append(s.on[p.Addr()], n)
				}
			}
		}
		w.mu.Lock()
		w.samples = append(w.samples, s)
		w.mu.Unlock()
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

func (w *bindWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// span is a time interval.
type span struct{ from, to time.Time }

func (s span) String() string {
	return fmt.Sprintf("%s–%s (%s)", s.from.Format("15:04:05.000"), s.to.Format("15:04:05.000"), s.to.Sub(s.from).Round(time.Millisecond))
}

// bindReport is what a bindWatch saw for one IP.
type bindReport struct {
	ip      netip.Addr
	samples int
	// double lists the intervals in which two or more nodes had the IP.
	double []span
	// unbound lists the intervals in which no node had it.
	unbound []span
	// holders lists the nodes that had it alone, in order, without repeats
	// of consecutive samples.
	holders []string
}

func (r bindReport) longestUnbound() time.Duration {
	var d time.Duration
	for _, s := range r.unbound {
		d = max(d, s.to.Sub(s.from))
	}
	return d
}

func (r bindReport) String() string {
	return fmt.Sprintf("%s on the nodes: %d samples, holders %v, unbound %v, on two nodes %v", r.ip, r.samples, r.holders, r.unbound, r.double)
}

// report stops the watch and summarises it per IP. An interval runs from
// the first sample showing the condition to the first sample not showing it.
func (w *bindWatch) report() map[netip.Addr]bindReport {
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[netip.Addr]bindReport{}
	for _, ip := range w.ips {
		r := bindReport{ip: ip, samples: len(w.samples)}
		var dbl, unb *span
		closeSpan := func(open **span, list *[]span, at time.Time) {
			if *open != nil {
				(*open).to = at
				*list = append(*list, **open)
				*open = nil
			}
		}
		for _, s := range w.samples {
			on := s.on[ip]
			switch {
			case len(on) > 1:
				if dbl == nil {
					dbl = &span{from: s.at}
				}
				closeSpan(&unb, &r.unbound, s.at)
			case len(on) == 0:
				if unb == nil {
					unb = &span{from: s.at}
				}
				closeSpan(&dbl, &r.double, s.at)
			default:
				closeSpan(&dbl, &r.double, s.at)
				closeSpan(&unb, &r.unbound, s.at)
				if len(r.holders) == 0 || r.holders[len(r.holders)-1] != on[0] {
					r.holders = append(r.holders, on[0])
				}
			}
		}
		if len(w.samples) > 0 {
			end := w.samples[len(w.samples)-1].at
			closeSpan(&dbl, &r.double, end)
			closeSpan(&unb, &r.unbound, end)
		}
		out[ip] = r
	}
	return out
}

// throughout checks cond every 100 ms for d and fails the test at the first
// violation: it is how a test keeps a fault in place while watching that
// nothing goes wrong meanwhile. cond returns "" while all is well.
func (e *env) throughout(what string, d time.Duration, cond func() string) {
	e.t.Helper()
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	for {
		if msg := cond(); msg != "" {
			e.t.Fatalf("%s: after %s: %s", what, time.Since(began).Round(time.Millisecond), msg)
		}
		select {
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}

// stillAnswering is a throughout condition: each probe's latest reply
// answers one of the requests sent within the last `within` (counted in
// requests, so that a test process starved of CPU on a loaded machine,
// which sends and reads late alike, is not mistaken for an outage) and
// comes from the expected node.
func (e *env) stillAnswering(probes map[netip.Addr]*testenv.Probe, from map[netip.Addr]string, within time.Duration) func() string {
	return func() string {
		for ip, p := range probes {
			r := p.Result()
			if msg := answeredWithin(r, within); msg != "" {
				return msg
			}
			if last, want := r.LastMAC(), e.mac(from[ip]); !bytes.Equal(last, want) {
				return fmt.Sprintf("%s answered by %s, want %s", ip, e.nodeOfMAC(last), from[ip])
			}
		}
		return ""
	}
}

// answeredWithin says what is wrong if the probe's latest reply does not
// answer one of the requests sent within the last `within`.
func answeredWithin(r testenv.ProbeResult, within time.Duration) string {
	if len(r.Replies) == 0 {
		return fmt.Sprintf("%s never answered", r.Target)
	}
	last := r.Replies[len(r.Replies)-1]
	if unanswered := time.Duration(r.Sent-1-last.Seq) * r.Interval; unanswered > within {
		return fmt.Sprintf("%s has not answered the requests of the last %s", r.Target, unanswered)
	}
	return ""
}

// clientView logs what the client saw of one IP, in the form the fault
// report quotes, and returns the longest gap.
func (e *env) clientView(what string, r testenv.ProbeResult) time.Duration {
	e.t.Helper()
	var macs []string
	for _, m := range r.MACs() {
		macs = append(macs, e.nodeOfMAC(m))
	}
	gap := r.LongestGap()
	ov := "none"
	if o := r.Overlaps(); len(o) > 0 {
		ov = fmt.Sprint(o)
	}
	e.t.Logf("CLIENT VIEW %s: %s: %d sent, %d lost, longest gap %s (%s–%s), answered by %v, two MACs: %s",
		what, r.Target, r.Sent, r.Lost(), gap.Duration().Round(time.Millisecond),
		gap.From.Format("15:04:05.000"), gap.To.Format("15:04:05.000"), macs, ov)
	return gap.Duration()
}

// atMostOneProbeOfTwoMACs fails on any interval of two answering MACs
// longer than one probe interval, and logs any shorter one.
func (e *env) atMostOneProbeOfTwoMACs(r testenv.ProbeResult) {
	e.t.Helper()
	for _, o := range r.Overlaps() {
		if o.LastSeq-o.FirstSeq >= 1 {
			e.t.Errorf("%s: two MACs answered for more than one probe interval: %v", r.Target, o)
		} else {
			e.t.Logf("%s: two MACs answered within one probe interval: %v", r.Target, o)
		}
	}
}

// lockState is what "nothing moved" compares.
type lockState struct {
	Holder      string
	Transitions int32
}

func (e *env) lockStates(ips ...netip.Addr) map[netip.Addr]lockState {
	e.t.Helper()
	out := map[netip.Addr]lockState{}
	for _, ip := range ips {
		l := e.lock(ip)
		if l == nil {
			continue
		}
		var s lockState
		if l.Spec.HolderIdentity != nil {
			s.Holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			s.Transitions = *l.Spec.LeaseTransitions
		}
		out[ip] = s
	}
	return out
}

// servedAll waits for every IP to be served and returns the holders.
func (e *env) servedAll(ips ...netip.Addr) map[netip.Addr]string {
	e.t.Helper()
	out := map[netip.Addr]string{}
	for _, ip := range ips {
		out[ip] = e.served(ip)
	}
	return out
}

// probeAll starts a 10 ms probe per IP.
func (e *env) probeAll(ips ...netip.Addr) map[netip.Addr]*testenv.Probe {
	e.t.Helper()
	out := map[netip.Addr]*testenv.Probe{}
	for _, ip := range ips {
		out[ip] = e.probe(ip)
	}
	return out
}

// heartbeatsFresh waits until every running daemon's heartbeat was renewed
// within its last renewal period and a second (its renewTime is the node's
// clock, which is this machine's). A heartbeat is renewed four times per
// lease duration: every 500 ms, or every 5 s while liveness goes over the
// LAN and the heartbeat lasts 20 s.
func (e *env) heartbeatsFresh(nodes ...string) {
	e.t.Helper()
	e.eventually("heartbeats renewed", func() (bool, string) {
		for _, n := range nodes {
			l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(n), metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var period time.Duration
			if d := l.Spec.LeaseDurationSeconds; d != nil {
				period = time.Duration(*d) * time.Second / 4
			}
			if l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > period+time.Second {
				return false, n + " not renewed recently"
			}
		}
		return true, ""
	})
}

// heartbeat reads a node's heartbeat annotations; nil when it has none.
func (e *env) heartbeat(node string) map[string]string {
	e.t.Helper()
	l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(e.ctx, lease.HeartbeatName(node), metav1.GetOptions{})
	if err != nil {
		return nil
	}
	if l.Annotations == nil {
		return map[string]string{}
	}
	return l.Annotations
}

// logMark is a position in a daemon's log: logged looks only after it.
type logMark map[string]int64

func (e *env) markLogs() logMark {
	m := logMark{}
	for _, n := range e.nodes {
		if fi, err := os.Stat(e.c.DaemonLog(n)); err == nil {
			m[n] = fi.Size()
		}
	}
	return m
}

// logSince is the daemon log of node written after the mark.
func (e *env) logSince(m logMark, node string) string {
	b, err := os.ReadFile(e.c.DaemonLog(node))
	if err != nil {
		return ""
	}
	if off := m[node]; off <= int64(len(b)) {
		b = b[off:]
	}
	return string(b)
}

// logged waits until node's daemon logged a line containing every one of
// parts after the mark, and returns that line. A part may appear as written
// or quoted, as slog's text handler writes a value holding quotes.
func (e *env) logged(m logMark, node string, parts ...string) string {
	e.t.Helper()
	var found string
	e.eventually(fmt.Sprintf("%s logs %q", node, parts), func() (bool, string) {
		for _, line := range strings.Split(e.logSince(m, node), "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && (strings.Contains(line, p) || strings.Contains(line, strings.ReplaceAll(p, `"`, `\"`)))
			}
			if ok {
				found = line
				return true, ""
			}
		}
		return false, "not yet"
	})
	return found
}

// countLines counts the lines of node's log after the mark that contain s.
func (e *env) countLines(m logMark, node, s string) int {
	return strings.Count(e.logSince(m, node), s)
}

// warningSince waits for a Warning event with reason on the object whose
// message contains every one of parts and that was last seen at or after
// since, and returns its message.
func (e *env) warningSince(kind, name, reason string, since time.Time, parts ...string) string {
	e.t.Helper()
	var msg string
	e.eventually(fmt.Sprintf("Warning %s on %s %s mentioning %q", reason, kind, name, parts), func() (bool, string) {
		evs := e.events(kind, name, reason)
		for _, ev := range evs {
			if ev.Type != "Warning" || lastSeen(ev).Before(since.Truncate(time.Second)) {
				continue
			}
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(ev.Message, p)
			}
			if ok {
				msg = ev.Message
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d %s events", len(evs), reason)
	})
	return msg
}

// lastSeen is when ev was last reported, whichever of the Event APIs
// reported it.
func lastSeen(ev corev1.Event) time.Time {
	last := ev.LastTimestamp.Time
	if ev.Series != nil {
		last = ev.Series.LastObservedTime.Time
	}
	if ev.EventTime.After(last) {
		last = ev.EventTime.Time
	}
	return last
}

// Guards that undo a fault when a test ends early, so that the next test's
// newEnv finds a working cluster.

func (e *env) guardAPIServer() {
	e.t.Cleanup(func() {
		if err := e.c.StartAPIServer(e.ctx); err != nil && !strings.Contains(err.Error(), "already running") {
			e.t.Errorf("restart kube-apiserver: %v", err)
		}
	})
}

func (e *env) guardEtcd() {
	e.t.Cleanup(func() {
		if err := e.c.StartEtcd(e.ctx); err != nil && !strings.Contains(err.Error(), "already running") {
			e.t.Errorf("restart etcd: %v", err)
		}
	})
}

// blockAPI cuts node off the API server and returns the function that
// restores it; a cleanup restores it if the test does not.
func (e *env) blockAPI(node string) (unblock func()) {
	e.t.Helper()
	e.must(e.c.BlockAPI(e.ctx, node))
	var once sync.Once
	undo := func() error {
		var err error
		once.Do(func() { err = e.c.UnblockAPI(e.ctx, node) })
		return err
	}
	e.t.Cleanup(func() { _ = undo() })
	return func() {
		e.t.Helper()
		e.must(undo())
	}
}

func (e *env) cutLink(node string) {
	e.t.Helper()
	e.must(e.c.CutLink(e.ctx, node))
	e.t.Cleanup(func() { _ = e.c.RestoreLink(e.ctx, node) })
}

// killDaemonsOnCleanup makes sure no daemon started with odd flags outlives
// the test (newEnv kills them too, but not after the last test).
func (e *env) killDaemonsOnCleanup() {
	e.t.Cleanup(func() {
		for _, n := range e.nodes {
			_ = e.c.StopDaemon(n, syscall.SIGKILL)
		}
	})
}

// assertNothingMoved compares two lock snapshots.
func (e *env) assertNothingMoved(before, after map[netip.Addr]lockState) {
	e.t.Helper()
	assert.DeepEqual(e.t, after, before)
}

// startPoint is Service "web" served and watched before a fault.
type startPoint struct {
	holders map[netip.Addr]string         // who holds each IP
	before  map[netip.Addr]lockState      // each IP's lock
	probes  map[netip.Addr]*testenv.Probe // each answering from its holder
	w       *bindWatch                    // the IPs' bindings from here on
	mark    logMark                       // the daemons' logs from here on
	// answering is a throughout condition: each IP still answers the
	// probe, through its holder.
	answering func() string
}

// reach is how a test's client reaches some IPs: on the LAN, or through
// the router (route mode).
type reach struct {
	ips []netip.Addr
	// serve waits until ip is served and returns its holder.
	serve func(ip netip.Addr) string
	// probe starts a 10 ms probe of ip and waits until it is answered
	// through holder.
	probe func(ip netip.Addr, holder string) *testenv.Probe
	// answering is the throughout condition of startPoint.answering for
	// these IPs.
	answering func(probes map[netip.Addr]*testenv.Probe, holders map[netip.Addr]string) func() string
}

// onLAN is reach for the client on the nodes' LAN, which sees the MAC
// that answers.
func (e *env) onLAN(ips ...netip.Addr) reach {
	return reach{
		ips:   ips,
		serve: e.served,
		probe: func(ip netip.Addr, holder string) *testenv.Probe {
			p := e.probe(ip)
			e.answersFrom(p, holder)
			return p
		},
		answering: func(probes map[netip.Addr]*testenv.Probe, holders map[netip.Addr]string) func() string {
			return e.stillAnswering(probes, holders, time.Second)
		},
	}
}

// startPoint creates Service "web" for ips and waits until each is served,
// every heartbeat is fresh and each IP answers the client from its holder.
func (e *env) startPoint(ips ...netip.Addr) startPoint {
	e.t.Helper()
	return e.startPointVia(e.onLAN(ips...))
}

// startPointVia is startPoint for IPs that clients reach in different
// ways: one Service "web" with all of them, each reached as its group says.
func (e *env) startPointVia(groups ...reach) startPoint {
	e.t.Helper()
	var ips []netip.Addr
	for _, g := range groups {
		ips = append(ips, g.ips...)
	}
	e.service("web", ips...)
	st := startPoint{holders: map[netip.Addr]string{}, probes: map[netip.Addr]*testenv.Probe{}}
	for _, g := range groups {
		for _, ip := range g.ips {
			st.holders[ip] = g.serve(ip)
		}
	}
	e.heartbeatsFresh(e.nodes...)
	st.before = e.lockStates(ips...)
	var conds []func() string
	for _, g := range groups {
		probes := map[netip.Addr]*testenv.Probe{}
		for _, ip := range g.ips {
			probes[ip] = g.probe(ip, st.holders[ip])
			st.probes[ip] = probes[ip]
		}
		conds = append(conds, g.answering(probes, st.holders))
	}
	st.answering = func() string {
		for _, c := range conds {
			if msg := c(); msg != "" {
				return msg
			}
		}
		return ""
	}
	st.w = e.watchBindings(ips...)
	st.mark = e.markLogs()
	return st
}

// takenOver waits until a node other than old holds ip and the client's
// probe p hears it from that node, and returns the node.
func (e *env) takenOver(ip netip.Addr, old string, p *testenv.Probe) string {
	e.t.Helper()
	var next string
	e.eventually("a survivor holds "+ip.String(), func() (bool, string) {
		next = e.holder(ip)
		return next != "" && next != old, "holder " + next
	})
	e.answersFrom(p, next)
	return next
}
