package agent

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"net/netip"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/wire"
)

// wireHold is how long a node that was given an IP because it heard no
// answer for it keeps it before acting on its own successor's "none": an
// IP moves for the wire at most once in it, so two nodes that do not hear
// each other for one IP do not pass it back and forth (docs/design.md,
// Checking the wire).
const wireHold = time.Minute

// wireRepair is how long after announcing an IP again the holder waits for
// its successor to hear it before handing the IP to that node
// (lease.View.WireRepair): some ten rechecks.
const wireRepair = 5 * time.Second

// wireChecks is this node's part in checking the wire: as a successor, the
// IPs it probes for their holders, their verdicts, and the fresh check
// kubectl asked for; as a holder, what it did about its successors'
// verdicts. It holds no pointer to the loop's state; the loop calls it
// with what it needs.
type wireChecks struct {
	sched  *wire.Schedule // nil: checking is off
	ifaces map[netip.Addr]string
	// request is the latest check request in this node's heartbeat,
	// askedAt when it was seen, done the last one answered.
	request, done string
	askedAt       time.Time
	// deferred: judging waits, for claims not yet read, until then.
	deferred time.Time
	// reports caches the successors' reports by their text.
	reports map[string]parsedReport
	// unheard: IPs this node holds that its successor hears no answer
	// for, with the report's since and when this node announced again.
	unheard map[netip.Addr]unheardIP
	// movedHere is when this node came to hold each IP its own checks
	// had found unanswered: given to it for the wire.
	movedHere map[netip.Addr]time.Time

	// What it is handed: the announcer that asks and announces again,
	// the heartbeats' cache (this node's holds the check requests), and
	// where it reports.
	announcer  Announcer
	heartbeats func() []*coordinationv1.Lease
	log        *slog.Logger
	metrics    Metrics
	events     *eventPoster
	node       string
}

type parsedReport struct {
	text   string
	report wire.Report
}

type unheardIP struct {
	since, announced time.Time
}

// newWireChecks is node's checks at pace (zero Every: none), made through
// announcer, reported to log, metrics and events.
func newWireChecks(node string, pace wire.Pace, announcer Announcer, heartbeats func() []*coordinationv1.Lease, log *slog.Logger, metrics Metrics, events *eventPoster) wireChecks {
	w := wireChecks{
		ifaces: map[netip.Addr]string{}, reports: map[string]parsedReport{}, unheard: map[netip.Addr]unheardIP{}, movedHere: map[netip.Addr]time.Time{},
		announcer: announcer, heartbeats: heartbeats, log: log, metrics: metrics, events: events, node: node,
	}
	if pace.Every > 0 {
		h := fnv.New64a()
		h.Write([]byte(node))
		w.sched = wire.NewSchedule(pace, h.Sum64())
	}
	return w
}

// track verifies ip, held by holder, probing from iface; untrack stops.
func (w *wireChecks) track(ip netip.Addr, holder, iface string, now time.Time) {
	if w.sched == nil {
		return
	}
	w.sched.Track(ip, holder, now)
	w.ifaces[ip] = iface
}

func (w *wireChecks) untrack(ip netip.Addr) {
	if w.sched == nil || !w.sched.Tracks(ip) {
		return
	}
	w.sched.Untrack(ip)
	delete(w.ifaces, ip)
}

func (w *wireChecks) tracks(ip netip.Addr) bool { return w.sched != nil && w.sched.Tracks(ip) }

// answer records mac's answer for ip, if this node checks it.
func (w *wireChecks) answer(ip netip.Addr, mac string, now time.Time) {
	if w.tracks(ip) {
		w.sched.Answer(ip, mac, now)
	}
}

// lost: frames were dropped before this node read them, answers to its
// checks perhaps among them.
func (w *wireChecks) lost(now time.Time) {
	if w.sched != nil {
		w.sched.Lost(now)
	}
}

// wireSlot groups the checks into the loop's wakes: the probes due and
// the answers judged within one slot are handled at its end. Each IP's own
// time woke the loop some 200 times a second at 1,000 IPs on three nodes.
const wireSlot = 100 * time.Millisecond

// next is when the checks next need the loop: the end of the slot of the
// first probe due or wait over.
func (w *wireChecks) next() time.Time {
	if w.sched == nil {
		return time.Time{}
	}
	t, ok := w.sched.Next()
	if !ok {
		return time.Time{}
	}
	if r := t.Sub(t.Truncate(wireSlot)); r > 0 {
		t = t.Add(wireSlot - r)
	}
	return later(t, w.deferred)
}

// ask takes a check request read from this node's heartbeat.
func (w *wireChecks) ask(token string, now time.Time) {
	if w.sched == nil || token == "" || token == w.request {
		return
	}
	w.request, w.askedAt = token, now
	w.sched.CheckAll(now)
}

// answered marks the request done once every IP was checked after it.
func (w *wireChecks) answered() {
	if w.request == w.done {
		return
	}
	if t, ok := w.sched.CheckedSince(); ok && !t.Before(w.askedAt) || len(w.ifaces) == 0 {
		w.done = w.request
	}
}

// status is what the heartbeat says of the wire.
func (w *wireChecks) status(now time.Time) (report string, checked time.Time, done string) {
	if w.sched == nil {
		return "", time.Time{}, ""
	}
	checked, _ = w.sched.CheckedSince()
	return w.sched.Report(now).Format(), checked, w.done
}

// reportOf is the wire report in hb, parsed once per text.
func (w *wireChecks) reportOf(hb lease.Heartbeat) wire.Report {
	if p, ok := w.reports[hb.Node]; ok && p.text == hb.Wire {
		return p.report
	}
	r, _ := wire.ParseReport(hb.Wire) // a damaged entry is left out
	w.reports[hb.Node] = parsedReport{text: hb.Wire, report: r}
	return r
}

// unheardSince is lease.IP.Unheard for ip, held and bound here, given its
// successor's entry for it (ok false: none, or one not to act on). It
// says too whether to announce ip again now: the verdict is new.
func (w *wireChecks) unheardSince(ip netip.Addr, e wire.Entry, ok bool, now time.Time) (at time.Time, announce bool) {
	if t, moved := w.movedHere[ip]; moved && now.Sub(t) < wireHold {
		ok = false
	}
	if !ok || e.Verdict != wire.NoAnswer {
		delete(w.unheard, ip)
		return time.Time{}, false
	}
	u, known := w.unheard[ip]
	if known && u.since.Equal(e.Since) {
		return u.announced, false
	}
	w.unheard[ip] = unheardIP{since: e.Since, announced: now}
	return now, true
}

// held notes whether ip is held here: one this node checked and found
// unanswered was given to it for the wire.
func (w *wireChecks) held(ip netip.Addr, holding bool, now time.Time) {
	if !holding {
		delete(w.movedHere, ip)
		delete(w.unheard, ip)
		return
	}
	if !w.tracks(ip) {
		return
	}
	if e, _ := w.sched.Verdict(ip); e.Verdict == wire.NoAnswer {
		w.movedHere[ip] = now
	}
}

// ifaceResolver says where an IP would be bound (binder.ifaceFor).
type ifaceResolver interface {
	ifaceFor(ip netip.Addr, on config.Binding) (string, error)
}

// decide is the wire's part in deciding in: as successor of a live
// holder other than this node it checks it, and as its holder it reads
// its successor's report (lease.IP.Unheard) and announces it again on
// boundOn when the report is new. on is how the IP is bound.
func (w *wireChecks) decide(in *lease.IP, on config.Binding, boundOn string, live *lease.Liveness, ifaces ifaceResolver, now time.Time) {
	lk := in.Lock
	self := w.node
	holding := lk != nil && lk.Holder == self && in.Named
	w.held(in.Addr, holding, now)
	// An IP announced only as a route (announce=bgp) is answered by no
	// one on the LAN by design: only those announced by ARP/NDP are checked.
	lan := on.Announce.ARP()
	if lan && lk != nil && in.Named && lk.Successor == self && lk.Holder != "" && lk.Holder != self && live.Alive(lk.Holder, now) {
		if iface, err := ifaces.ifaceFor(in.Addr, on); err == nil {
			w.track(in.Addr, lk.Holder, iface, now)
		}
	} else {
		w.untrack(in.Addr)
	}
	if !lan || !holding || !in.Bound || lk.Successor == "" || lk.Successor == self {
		return
	}
	hb, ok := live.Heartbeat(lk.Successor)
	if !ok {
		return
	}
	r := w.reportOf(hb)
	e, listed := r.Entries[in.Addr]
	at, announce := w.unheardSince(in.Addr, e, listed && r.Heard, now)
	in.Unheard = at
	if !announce {
		return
	}
	if err := w.announcer.Announce(boundOn, in.Addr); err != nil {
		w.log.Warn("announce again", "ip", in.Addr, "iface", boundOn, "err", err)
	}
	w.log.Warn("the IP's successor hears no answer for it; announced it again", "ip", in.Addr, "iface", boundOn, "node", lk.Successor)
	w.events.onIP(in.Addr, corev1.EventTypeWarning, "AddressUnanswered",
		fmt.Sprintf("%s, bound on %s, is not answered on the LAN as %s hears it: %s announced it again and hands it to %s if it still hears nothing in %s",
			in.Addr, self, lk.Successor, self, lk.Successor, wireRepair))
}

// check sends the checks due and judges those whose wait is over. A
// check is a plain request (Announcer.Ask), never a probe: a holder cut
// off from the API server reads a peer's probe as a takeover and gives
// the IP up (claim). While this node's own renewals fail (apiOK false) it
// sends none: it could act on no verdict, and its view of who holds what
// may be stale.
func (w *wireChecks) check(now time.Time, apiOK bool, live *lease.Liveness, l claimListener) {
	if w.sched == nil || !apiOK {
		return
	}
	for _, ip := range w.sched.Due(now) {
		iface := w.ifaces[ip]
		l.watchClaimsOn(iface)
		l.listenFor(ip) // before an answer may come
		if err := w.announcer.Ask(iface, ip); err != nil {
			// A check that never left proves nothing about the holder.
			w.sched.Unsent(ip, now)
			w.log.Debug("wire check", "ip", ip, "iface", iface, "err", err)
			continue
		}
		w.metrics.WireCheck()
	}
	// Claims the loop has not read yet may hold the answers: judge once
	// they are in (the loop wakes for the checks again after reading them,
	// or at the next wire slot).
	if l.unheard() {
		w.deferred = now.Add(wireSlot)
		return
	}
	changed := w.sched.Finish(now, func(node string) []string {
		hb, _ := live.Heartbeat(node)
		return lease.ParseMACs(hb.MACs)
	})
	for _, ip := range changed {
		e, _ := w.sched.Verdict(ip)
		w.judged(ip, e)
	}
	if len(changed) > 0 {
		w.metrics.WireVerdicts(w.sched.Counts())
	}
	w.answered()
}

// judged reports a new verdict on ip: a stranger or two MACs is a
// conflict, said once per verdict; nobody fights over it.
func (w *wireChecks) judged(ip netip.Addr, e wire.Entry) {
	w.log.Info("wire verdict", "ip", ip, "verdict", e.Verdict.String(), "macs", strings.Join(e.MACs, ","))
	if e.Verdict != wire.Stranger && e.Verdict != wire.TwoMACs {
		return
	}
	w.metrics.AddressConflict()
	w.events.onIP(ip, corev1.EventTypeWarning, "AddressConflict",
		fmt.Sprintf("%s is answered on the LAN by %s (%s, as %s hears it), not by its holder alone: eip neither moves it nor announces back; take the address off the other machine",
			ip, strings.Join(e.MACs, " and "), e.Verdict, w.node))
}

// requested takes a check request from this node's own heartbeat, as
// the cache has it: kubectl writes it between two renewals.
func (w *wireChecks) requested(now time.Time) {
	name := lease.HeartbeatName(w.node)
	for _, l := range w.heartbeats() {
		if l.Name == name {
			w.ask(l.Annotations[lease.AnnotationCheckRequest], now)
			return
		}
	}
}

// keepWire drops what the checks knew of IPs keep refuses.
func (w *wireChecks) keep(keep func(netip.Addr) bool) {
	maps.DeleteFunc(w.movedHere, func(ip netip.Addr, _ time.Time) bool { return !keep(ip) })
	maps.DeleteFunc(w.unheard, func(ip netip.Addr, _ unheardIP) bool { return !keep(ip) })
	for ip := range w.ifaces {
		if !keep(ip) {
			w.untrack(ip)
		}
	}
}
