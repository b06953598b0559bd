package agent

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// schedule is when the loop passes, and over what: the inputs that ask
// for a full pass, the IPs to decide again, and the times it set.
type schedule struct {
	// dirtyEps: an EndpointSlice changed, which decides again only the IPs
	// of Local Services whose eligible nodes changed (serving.update).
	dirtySvc, dirtyNodes, dirtyCM, dirtyEps bool
	wake                                    time.Time
	lastResync                              time.Time
	// lastPass is when the last full pass ran and passVerdicts what it
	// read of each node; passWritable is whether this node could write at
	// the last pass, full or not (see passDue), and fullUnwritable whether
	// it could not at the last full one, which then allocated nothing and
	// collected no heartbeat.
	lastPass       time.Time
	passStart      time.Time // when the pass under way began (sliceOver)
	passWritable   bool
	fullUnwritable bool
	passVerdicts   map[string]verdict
	// writableDeps are the IPs whose last decision depends on whether
	// this node may write: a change of that decides only them again
	// (writableChanged).
	writableDeps map[netip.Addr]bool
	// needFull says an input since the last pass changed something every
	// IP reads; hbDirty that a heartbeat was renewed. dirty are the IPs
	// whose lock, write or address changed. ipWake holds each IP's own
	// decision time.
	needFull, hbDirty bool
	dirty             map[netip.Addr]bool
	dirtyOrder        []netip.Addr // dirty in address order, kept for its room
	ipWake            ipWakes
	// lateBinds are held IPs not bound because the loop was late; its
	// next tick on time decides them again.
	lateBinds map[netip.Addr]bool
	// first says, per IP of order, whether the last full pass decided it
	// among those that go first (reconcile); kept for the next one.
	first []bool
}

// moment is what the schedule reads of the rest of the loop at now:
// whether this node may write, the liveness judge (each node's verdict is
// a map a call, so worked out only when asked), the end of a pause
// between acquisitions (paceUntil, see congestion), the resync period,
// whether the policy is spread, and the times the loop must wake at
// besides the schedule's own (that pause's end, a node's verdict
// expiring, being unheard, the wire's next check, the next announcement).
type moment struct {
	now       time.Time
	writable  bool
	live      *lease.Liveness
	paceUntil time.Time
	resync    time.Duration
	spread    bool
	wakes     [5]time.Time
}

// passDue says whether the renew tick, the result of a renewal or the
// timer needs a reconcile pass at m. None of them changes a lock, a
// Service or a heartbeat in the cache: those wake the loop themselves.
// What a pass reads that changes with time alone is a decision's own time
// (wake: a rank's turn, fence-after, an allocation's retry), the end of a
// pause between acquisitions, a node's verdict (seen renewing, judged
// dead), and whether this node may write (a renewal failed or came back,
// the watch went quiet); the last two are compared with the last pass. A
// full pass every resync period stays as a safety net. At 10,000 IPs a
// pass costs tens of milliseconds, and ticks and renewals came four times
// a second.
func (s *schedule) passDue(m moment) bool {
	return !s.wake.IsZero() && !m.now.Before(s.wake) ||
		!s.ipWake.min.IsZero() && !m.now.Before(s.ipWake.min) || len(s.dirty) > 0 ||
		!m.paceUntil.IsZero() && !m.now.Before(m.paceUntil) ||
		m.writable != s.passWritable ||
		!maps.Equal(s.passVerdicts, verdictsOf(m.live, m.now)) ||
		m.now.Sub(s.lastPass) >= m.resync
}

// nextWake is when the timer should wake the loop: a decision's time, the
// end of a pause between acquisitions, or the next moment a node's verdict
// changes if no heartbeat does.
func (s *schedule) nextWake(m moment) time.Time {
	next := s.wake
	sooner := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	sooner(s.ipWake.min)
	for _, t := range m.wakes {
		sooner(t)
	}
	return next
}

// fullDue says whether the pass at m goes over every IP: an input every IP
// reads changed, a time the pass itself set came, a node's verdict
// changed, the policy is spread, or the resync period passed.
func (s *schedule) fullDue(m moment) bool {
	return s.needFull || s.dirtySvc || s.dirtyNodes || s.dirtyCM || m.spread ||
		!s.wake.IsZero() && !m.now.Before(s.wake) ||
		!maps.Equal(s.passVerdicts, verdictsOf(m.live, m.now)) ||
		m.now.Sub(s.lastPass) >= m.resync
}

// writableChanged answers a change of whether this node may write: the
// IPs whose decision read it are decided again, not every IP. Most do not
// read it: a held and bound IP stays, a live peer's stays with it. A full
// pass here would feed itself when passes are slow (design-notes.md,
// "Writability decides again only what read it"). A stall ends when this node may write again (see tick), so the IPs a
// late loop did not bind are decided again then too. Allocation and
// collecting heartbeats happen in full passes alone: one that ran while
// this node could not write is run again once it can.
func (s *schedule) writableChanged(w bool) {
	s.passWritable = w
	for ip := range s.writableDeps {
		s.dirty[ip] = true
	}
	clear(s.writableDeps)
	if !w {
		return
	}
	s.onTime()
	if s.fullUnwritable {
		s.needFull = true
	}
}

// takeLockChanges marks dirty the IPs of the locks the informer saw
// change since the last pass, and says whether it saw any Lease change. A
// holder vouched for that this node judged dead is alive again: every IP
// reads that, so the pass is a full one.
func (s *state) takeLockChanges() bool {
	names, all, vouched := s.leases.takeLeaseChanges()
	now := s.clk.Now()
	for _, n := range vouched {
		if !s.live.Alive(n, now) {
			s.sched.askFull()
		}
		s.live.Vouched(n, now)
	}
	if all {
		s.sched.askFull()
	}
	for name := range names {
		if ip, ok := s.desired.names[name]; ok {
			s.sched.markDirty(ip)
			if l := s.leases.lock(name); l != nil && l.Err == nil && l.Owner != "" && !recordsOwner(&l.Lock, s.desired.entries[ip].Owner) {
				// The owner the lock records is an input of ownership
				// (ipset.Incumbents), as the Services are.
				s.sched.inputChanged(inServices)
				s.sched.askFull()
			}
			continue
		}
		l := s.leases.lock(name)
		if l == nil {
			// An orphan's lock is gone: nothing is left to decide for its
			// IP, but a Service's allocation may have waited for it to be
			// released, and only the full pass allocates.
			s.sched.askFull()
			continue
		}
		if l.Err == nil {
			s.sched.markDirty(l.IP)
		} else {
			s.sched.askFull() // the full pass warns about it
		}
	}
	return all || len(names) > 0
}

// shrink returns m, or a new map of what it holds if that is little. A Go
// map keeps the room of the most it ever held, and at a cold start or a
// mass failover the loop's per-IP maps held thousands of IPs for a while
// (free, waiting, dirty, their wake times, our writes): at 10,000 IPs 2.4
// MB of heap that the steady state kept, when clear emptied them.
func shrink[K comparable, V any](m map[K]V) map[K]V {
	if len(m) > shrinkBelow {
		return m
	}
	out := make(map[K]V, len(m))
	maps.Copy(out, m)
	return out
}

// shrinkBelow: a per-IP map holding no more is made again by shrink.
const shrinkBelow = 64

// wakeFull asks for a full pass at t: for a time that is not one IP's.
func (s *schedule) wakeFull(t time.Time) {
	if s.wake.IsZero() || t.Before(s.wake) {
		s.wake = t
	}
}

func newSchedule() schedule {
	return schedule{
		dirtySvc: true, dirtyNodes: true, dirtyCM: true,
		writableDeps: map[netip.Addr]bool{},
		dirty:        map[netip.Addr]bool{},
		ipWake:       newIPWakes(),
		lateBinds:    map[netip.Addr]bool{},
	}
}

// askFull asks for a full pass: something every IP reads changed.
func (s *schedule) askFull() { s.needFull = true }

// inputChanged notes that an input every IP reads changed (in: inServices,
// inNodes, inConfigMap, inEndpoints or inHeartbeats, a renewal while the
// loop drains its inputs): the next pass reads it again.
func (s *schedule) inputChanged(in int) {
	switch in {
	case inServices:
		s.dirtySvc = true
	case inNodes:
		s.dirtyNodes = true
	case inConfigMap:
		s.dirtyCM = true
	case inEndpoints:
		s.dirtyEps = true
	case inHeartbeats:
		s.hbDirty = true
	}
}

// takeInputs says which of the inputs every IP reads changed since the
// last full pass, which reads them all again, and forgets it.
func (s *schedule) takeInputs() (cm, svc, nodes, eps bool) {
	cm, svc, nodes, eps = s.dirtyCM, s.dirtySvc, s.dirtyNodes, s.dirtyEps
	s.dirtyCM, s.dirtySvc, s.dirtyNodes, s.dirtyEps = false, false, false, false
	return cm, svc, nodes, eps
}

// endpointsRead forgets that an EndpointSlice changed: the pass under way
// reads them.
func (s *schedule) endpointsRead() { s.dirtyEps = false }

// takeRenewed says whether a heartbeat was renewed while the loop drained
// its inputs, and forgets it.
func (s *schedule) takeRenewed() bool {
	r := s.hbDirty
	s.hbDirty = false
	return r
}

// startPass notes when the pass under way began (sliceOver).
func (s *schedule) startPass(now time.Time) { s.passStart = now }

// newFullPass forgets what the last passes asked for: a full pass
// decides every IP again.
func (s *schedule) newFullPass() {
	s.wake = time.Time{}
	s.needFull = false
	// Emptied by new maps, not cleared: see shrink.
	s.dirty, s.lateBinds, s.writableDeps = map[netip.Addr]bool{}, map[netip.Addr]bool{}, map[netip.Addr]bool{}
	s.ipWake.reset()
}

// fullPassRead records what the full pass under way read at now: whether
// this node could write.
func (s *schedule) fullPassRead(now time.Time, writable bool) {
	s.lastPass, s.passWritable, s.fullUnwritable = now, writable, !writable
}

// judged records the verdicts on the nodes that the full pass just read.
func (s *schedule) judged(verdicts map[string]verdict) { s.passVerdicts = verdicts }

// goFirst says, for each of the n IPs in order, whether it goes first
// (reconcile); the slice is kept for the next full pass.
func (s *schedule) goFirst(n int, first func(i int) bool) []bool {
	s.first = slices.Grow(s.first[:0], n)[:n]
	for i := range s.first {
		s.first[i] = first(i)
	}
	return s.first
}

// dirtyInOrder returns the IPs to decide in an incremental pass at now:
// those marked dirty and those whose time came, in address order, so that
// the writes a pass makes depend on its inputs alone, not on the order of
// a map. The slice is reused by the next call.
func (s *schedule) dirtyInOrder(now time.Time) []netip.Addr {
	s.ipWake.due(now, func(ip netip.Addr) { s.dirty[ip] = true })
	s.dirtyOrder = s.dirtyOrder[:0]
	for ip := range s.dirty {
		s.dirtyOrder = append(s.dirtyOrder, ip)
	}
	slices.SortFunc(s.dirtyOrder, netip.Addr.Compare)
	return s.dirtyOrder
}

// dirtyDecided forgets the dirty IPs: the pass decided them.
func (s *schedule) dirtyDecided() { clear(s.dirty) }

// deciding forgets ip's own time: it is being decided.
func (s *schedule) deciding(ip netip.Addr) { s.ipWake.forget(ip) }

// onTime decides again the IPs a late loop did not bind: it is on time.
func (s *schedule) onTime() {
	for ip := range s.lateBinds {
		s.dirty[ip] = true
	}
	clear(s.lateBinds)
}

// resynced notes when the interfaces were last compared with what is
// bound (resync).
func (s *schedule) resynced(now time.Time) { s.lastResync = now }

// settling is what deciding an IP leaves for the schedule (settle).
type settling struct {
	// readWritable: the decision read whether this node may write
	// (lease.Decision.ReadWritable), or a move waits for it
	// (rebindIfMoved). keepDeps: nothing was judged of that (a decision
	// left while the IP's write is in flight, an address a late loop
	// may not restore), and what the IP had stays.
	readWritable, keepDeps bool
	at                     time.Time // the decision's own time, if any
	refusal                refusal   // why the IP was not bound, if it was not
}

// settle schedules what deciding ip asks for. It alone writes what the
// schedule keeps per IP of the decisions: whether it depends on whether
// this node may write (writableDeps), whether it waits for a tick on time
// (lateBinds), and its own time (ipWake). Each refusal says when the IP is
// decided again.
func (s *schedule) settle(ip netip.Addr, st settling) {
	if !st.keepDeps {
		if st.readWritable {
			s.writableDeps[ip] = true
		} else {
			delete(s.writableDeps, ip)
		}
	}
	if !st.at.IsZero() {
		s.ipWake.set(ip, st.at)
	}
	switch r := st.refusal; r.why {
	case notRefused:
	case refusedLate:
		s.lateBinds[ip] = true
	case refusedLinkDown, refusedFenced, refusedUnheard, refusedUnwritable:
		// Decided again when whether this node may write changes
		// (writableChanged), and at until, since a change that flips back
		// before any pass sees it asks for none (the IP stayed held and
		// unbound until the resync's full pass, 10 s later).
		s.writableDeps[ip] = true
		s.ipWake.set(ip, r.until)
	case refusedProbing:
		if !r.until.IsZero() {
			s.ipWake.set(ip, r.until)
		}
	case refusedSlice:
		s.ipWake.set(ip, r.until)
	}
}

// markDirty asks for a pass over ips: their lock, write or address
// changed.
func (s *schedule) markDirty(ips ...netip.Addr) {
	for _, ip := range ips {
		s.dirty[ip] = true
	}
}

// wakeIPs asks for a pass over ips at t.
func (s *schedule) wakeIPs(ips []netip.Addr, t time.Time) {
	for _, ip := range ips {
		s.ipWake.set(ip, t)
	}
}

// wakeIP asks for a pass over ip alone at t: a time of ip's decision, a
// probe or a bind. Deciding ip is all a full pass would do for it then.
func (s *schedule) wakeIP(ip netip.Addr, t time.Time) {
	s.ipWake.set(ip, t)
}

// heard answers a renewal of a heartbeat that the watch delivered, hbs
// being the heartbeats live observes at now, and reports whether a pass
// is needed: a full one when heartbeatsRenewed says so, one over the IPs
// that depend on it when whether this node may write changed (its own
// renewal came back), as writable says once live observed them.
func (s *schedule) heard(live *lease.Liveness, hbs []*coordinationv1.Lease, now time.Time, writable func(time.Time) bool) bool {
	if heartbeatsRenewed(live, hbs, s.passVerdicts, now) {
		s.askFull()
	}
	return s.needFull || writable(now) != s.passWritable
}

// heartbeatsRenewed has live observe the heartbeats hbs after a renewal
// of one at now, and reports whether a full pass is needed: only when what every IP's
// decision reads (a node's liveness, status or duration, or the set of
// nodes) differs from what the last full pass read (last). Peers renew several
// times a second, and a pass over every IP for each renewal that changed
// none of that was most of eipd's CPU at 5,000 IPs. What changes with
// time alone needs no event: the timer wakes the loop at the next expiry
// (nextWake).
func heartbeatsRenewed(live *lease.Liveness, hbs []*coordinationv1.Lease, last map[string]verdict, now time.Time) bool {
	known, seen := len(live.Nodes()), 0
	for _, l := range hbs {
		hb, err := lease.ParseHeartbeat(l)
		if err != nil {
			continue
		}
		if !live.Known(hb.Node) {
			return true
		}
		live.Observe(hb, now)
		seen++
	}
	return seen != known || !maps.Equal(last, verdictsOf(live, now))
}

// verdictsOf is what live judges of each node at now that a pass reads.
func verdictsOf(live *lease.Liveness, now time.Time) map[string]verdict {
	out := map[string]verdict{}
	for _, n := range live.Nodes() {
		hb, _ := live.Heartbeat(n)
		// Held is read by kubectl eip status, never by a pass, and during
		// a cold start or a mass failover it changes with every renewal
		// of every node: it made each a pass over every IP. Duration is
		// read by the liveness tracker alone, and what it judges with it
		// is alive and renewing: when a node died, each survivor left
		// slow heartbeats and both its renewal and its peer's asked every
		// survivor for a pass over every IP as the takeovers began.
		hb.Version, hb.RenewTime, hb.Held, hb.Duration = "", time.Time{}, 0, 0
		// The wire's check time and requests are read by the checks
		// alone (wirecheck.go); a report that changes is read by the
		// holders' decisions.
		hb.WireChecked, hb.CheckRequest, hb.CheckDone = time.Time{}, "", ""
		out[n] = verdict{alive: live.Alive(n, now), renewing: live.Renewing(n, now), status: hb}
	}
	return out
}

// pass answers the inputs handled since the last one. Only a change of
// something every IP reads needs a pass over every IP (reconcile): the
// configuration, a Service or a Node, a node's verdict, whether this node
// may write, a time the pass itself set, the policy spread (whose plan
// weighs every IP against the others), and the resync period. Otherwise
// only the IPs whose lock, write or address changed, or whose own
// decision time came, are decided again (reconcileSome): at 10,000 IPs a
// full pass costs tens of milliseconds, and at a cold start or a mass
// failover every few write results asked for one.
func (s *state) pass() {
	now := s.clk.Now()
	// The acquisitions waiting for a pause's end are decided below.
	s.writes.endPause(now)
	delivered := s.takeLockChanges()
	if renewed := s.sched.takeRenewed(); (renewed || delivered) && heartbeatsRenewed(s.live, s.leases.heartbeats(), s.sched.passVerdicts, s.clk.Now()) {
		s.sched.askFull()
	}
	if delivered {
		// The watch that carries the heartbeats delivered a Lease, and
		// every heartbeat the cache held after it was just observed.
		s.live.Delivered(now)
	}
	m := s.moment(now)
	if m.writable != s.sched.passWritable {
		s.sched.writableChanged(m.writable)
	}
	// fullDue only then: it reads every node's verdict, a map a call.
	if s.sched.dirtyEps && !s.sched.fullDue(m) {
		s.sched.endpointsRead()
		s.sched.markDirty(s.serving.update(false, &s.desired, s.binder.bound, s.view)...)
	}
	if s.sched.fullDue(m) {
		s.reconcile()
		return
	}
	s.reconcileSome(now)
}

// moment is what the schedule reads of the loop at now.
func (s *state) moment(now time.Time) moment {
	expiry, _ := s.live.NextExpiry(now)
	return moment{
		now: now, writable: s.writable(now), live: s.live,
		paceUntil: s.writes.paceUntil, resync: s.a.opt.Resync, spread: s.desired.cfg.Policy == config.PolicySpread,
		wakes: [5]time.Time{s.writes.paceUntil, expiry, s.self.unheardAt, s.wire.next(), s.reannouncer.next()},
	}
}

// verdict is what a reconcile pass reads about a node from its heartbeat.
type verdict struct {
	alive, renewing bool
	status          lease.Heartbeat // Version, RenewTime and Held cleared: they change with every renewal
}

// sliceOver: the pass under way has run for a quarter of a renew interval,
// so it binds and probes nothing more; the loop handles what came in
// meanwhile (its tick, the renewal's result, the watch's news) and goes on
// at once. A pass that bound a dead node's 1,700 IPs one after the other,
// a second and more on a loaded machine, starved the loop of its own
// renewals and of the watch: it was no longer writable, nor on time, and
// the IPs left waited half a second each time for the next pass.
func (s *schedule) sliceOver(now time.Time, renew time.Duration) bool {
	return !s.passStart.IsZero() && now.Sub(s.passStart) > renew/4
}
