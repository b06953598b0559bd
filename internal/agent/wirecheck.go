package agent

import (
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

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
}

type parsedReport struct {
	text   string
	report wire.Report
}

type unheardIP struct {
	since, announced time.Time
}

func newWireChecks(node string, pace wire.Pace) wireChecks {
	w := wireChecks{ifaces: map[netip.Addr]string{}, reports: map[string]parsedReport{}, unheard: map[netip.Addr]unheardIP{}, movedHere: map[netip.Addr]time.Time{}}
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

// wireDecide is the wire's part in deciding ip: as successor of a live
// holder other than this node it checks it, and as its holder it reads
// its successor's report (lease.IP.Unheard).
func (s *state) wireDecide(in *lease.IP, now time.Time) {
	lk := in.Lock
	self := s.a.opt.Node
	holding := lk != nil && lk.Holder == self && in.Named
	s.wire.held(in.Addr, holding, now)
	// An IP announced only as a route (announce=bgp) is answered by no
	// one on the LAN by design: only those announced by ARP/NDP are checked.
	lan := s.desired.entries[in.Addr].Binding.Announce.ARP()
	if lan && lk != nil && in.Named && lk.Successor == self && lk.Holder != "" && lk.Holder != self && s.live.Alive(lk.Holder, now) {
		if iface, err := s.binder.ifaceFor(in.Addr, s.desired.entries[in.Addr].Binding); err == nil {
			s.wire.track(in.Addr, lk.Holder, iface, now)
		}
	} else {
		s.wire.untrack(in.Addr)
	}
	if !lan || !holding || !in.Bound || lk.Successor == "" || lk.Successor == self {
		return
	}
	hb, ok := s.live.Heartbeat(lk.Successor)
	if !ok {
		return
	}
	r := s.wire.reportOf(hb)
	e, listed := r.Entries[in.Addr]
	at, announce := s.wire.unheardSince(in.Addr, e, listed && r.Heard, now)
	in.Unheard = at
	if !announce {
		return
	}
	b := s.binder.bound[in.Addr]
	if err := s.a.opt.Announcer.Announce(b.iface, in.Addr); err != nil {
		s.log.Warn("announce again", "ip", in.Addr, "iface", b.iface, "err", err)
	}
	s.log.Warn("the IP's successor hears no answer for it; announced it again", "ip", in.Addr, "iface", b.iface, "node", lk.Successor)
	s.events.onIP(in.Addr, corev1.EventTypeWarning, "AddressUnanswered",
		fmt.Sprintf("%s, bound on %s, is not answered on the LAN as %s hears it: %s announced it again and hands it to %s if it still hears nothing in %s",
			in.Addr, self, lk.Successor, self, lk.Successor, wireRepair))
}

// checkWire sends the checks due and judges those whose wait is over. A
// check is a plain request (Announcer.Ask), never a probe: a holder cut
// off from the API server reads a peer's probe as a takeover and gives
// the IP up (claim). While this node's own renewals fail it sends none: it
// could act on no verdict, and its view of who holds what may be stale.
func (s *state) checkWire(now time.Time) {
	w := &s.wire
	if w.sched == nil || !s.self.apiOK(now) {
		return
	}
	for _, ip := range w.sched.Due(now) {
		iface := w.ifaces[ip]
		s.binder.watchClaimsOn(iface)
		s.binder.listenFor(ip) // before an answer may come
		if err := s.a.opt.Announcer.Ask(iface, ip); err != nil {
			// A check that never left proves nothing about the holder.
			w.sched.Unsent(ip, now)
			s.log.Debug("wire check", "ip", ip, "iface", iface, "err", err)
			continue
		}
		s.a.opt.Metrics.WireCheck()
	}
	// Claims the loop has not read yet may hold the answers: judge once
	// they are in (the loop wakes for the checks again after reading them,
	// or at the next wire slot).
	if s.binder.unheard() {
		w.deferred = now.Add(wireSlot)
		return
	}
	changed := w.sched.Finish(now, func(node string) []string {
		hb, _ := s.live.Heartbeat(node)
		return lease.ParseMACs(hb.MACs)
	})
	for _, ip := range changed {
		e, _ := w.sched.Verdict(ip)
		s.wireChanged(ip, e)
	}
	if len(changed) > 0 {
		s.a.opt.Metrics.WireVerdicts(w.sched.Counts())
	}
	w.answered()
}

// wireChanged reports a new verdict on ip: a stranger or two MACs is a
// conflict, said once per verdict; nobody fights over it.
func (s *state) wireChanged(ip netip.Addr, e wire.Entry) {
	s.log.Info("wire verdict", "ip", ip, "verdict", e.Verdict.String(), "macs", strings.Join(e.MACs, ","))
	if e.Verdict != wire.Stranger && e.Verdict != wire.TwoMACs {
		return
	}
	s.a.opt.Metrics.AddressConflict()
	s.events.onIP(ip, corev1.EventTypeWarning, "AddressConflict",
		fmt.Sprintf("%s is answered on the LAN by %s (%s, as %s hears it), not by its holder alone: eip neither moves it nor announces back; take the address off the other machine",
			ip, strings.Join(e.MACs, " and "), e.Verdict, s.a.opt.Node))
}

// wireRequests takes a check request from this node's own heartbeat, as
// the cache has it: kubectl writes it between two renewals.
func (s *state) wireRequests(now time.Time) {
	name := lease.HeartbeatName(s.a.opt.Node)
	for _, l := range s.a.heartbeats() {
		if l.Name == name {
			s.wire.ask(l.Annotations[lease.AnnotationCheckRequest], now)
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
