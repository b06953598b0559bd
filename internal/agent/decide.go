package agent

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/policy"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// reconcileSome decides again the dirty IPs, those whose own decision
// time came, and as many waiting acquisitions as there is room for, those
// that go first first. TestIncrementalPassDecidesAsTheFullPass checks that a full pass
// after it would act not at all.
func (s *state) reconcileSome(now time.Time) {
	s.sched.passStart = now
	s.book.newPass(s.a.leasesSeen(), false)
	s.fence(now)
	v := s.view(now)
	if v.Writable {
		s.self.fenced = false
		s.self.stalled = false
	}
	s.sched.ipWake.due(now, func(ip netip.Addr) { s.sched.dirty[ip] = true })
	// In the order of the IPs, so that the writes a pass makes depend on
	// its inputs alone, not on the order of a map.
	s.sched.dirtyOrder = s.sched.dirtyOrder[:0]
	for ip := range s.sched.dirty {
		s.sched.dirtyOrder = append(s.sched.dirtyOrder, ip)
	}
	slices.SortFunc(s.sched.dirtyOrder, netip.Addr.Compare)
	for i, ip := range s.sched.dirtyOrder {
		if s.sliceOver(s.a.clk.Now()) {
			// The slice is spent: the rest are decided in the next pass,
			// once the loop has answered its inputs, as a bind that
			// yields is. Deciding each of them only for its bind to yield
			// cost a successor of 1,700 IPs a decision per IP left and
			// slice.
			for _, rest := range s.sched.dirtyOrder[i:] {
				s.sched.wakeIP(rest, now)
			}
			break
		}
		s.decideOne(v, ip, now)
	}
	clear(s.sched.dirty)
	s.writes.admitWaiting(now, s.desired.lockWriteTimeout(), func(ip netip.Addr) { s.decideOne(v, ip, now) })
	s.a.opt.Metrics.Held(len(s.binder.bound))
}

// decideOne decides one IP as the full pass would.
func (s *state) decideOne(v lease.View, ip netip.Addr, now time.Time) {
	name := lease.NameFor(ip)
	cached := s.a.lock(name)
	if _, named := s.desired.entries[ip]; named {
		l := s.book.effective(name, cached)
		s.decide(v, ip, name, l, true, s.planOne(v, ip, name, l))
		return
	}
	s.writes.unwait(ip)
	s.sched.ipWake.forget(ip)
	if cached != nil {
		s.decideOrphan(v, cached, now)
	} else if _, bound := s.binder.bound[ip]; bound {
		s.carryOut(ip, lease.Decide(v, lease.IP{Addr: ip, Bound: true}))
	}
}

// decideOrphan decides the lock l of an IP no Service names.
func (s *state) decideOrphan(v lease.View, l *lease.Kept, now time.Time) {
	if l = s.book.effective(l.Name, l); l == nil {
		return
	}
	if l.Err != nil {
		s.book.warnBadLock(l, "no Service names its IP, so it is ignored")
		return
	}
	if s.reservationSpared(l, l.IP, now) {
		return
	}
	s.decide(v, l.IP, l.Name, l, false, "")
}

// reconcile is one pass over everything; it is idempotent.
func (s *state) reconcile() {
	now := s.a.clk.Now()
	s.sched.passStart = now
	s.book.newPass(s.a.leasesSeen(), true)
	s.sched.wake = time.Time{}
	s.sched.needFull = false
	// Emptied by new maps, not cleared, and the others shrunk: see shrink.
	s.sched.dirty, s.sched.lateBinds = map[netip.Addr]bool{}, map[netip.Addr]bool{}
	s.writes.newPass()
	s.sched.ipWake.reset()
	s.wire.keep(func(ip netip.Addr) bool {
		_, named := s.desired.entries[ip]
		return named
	})
	s.binder.claimed.keepOnly(func(ip netip.Addr) bool {
		_, probing := s.conflicts.probing[ip]
		_, bound := s.binder.bound[ip]
		return probing || bound || s.wire.tracks(ip)
	})
	s.sched.writableDeps = map[netip.Addr]bool{}
	s.fence(now)
	changed := false
	if s.sched.dirtyCM {
		s.sched.dirtyCM = false
		changed = s.loadConfig()
		s.lifetime.configure(s.desired.cfg)
		s.configureLAN()
	}
	all := s.a.allLocks()
	locks := s.observe(all, now)
	starting := s.sched.lastPass.IsZero()
	if s.sched.dirtyNodes {
		reserved := s.reservedAddresses()
		if s.desired.reserved != nil && !maps.Equal(reserved, s.desired.reserved) {
			// A range may now contain an address never to be bound: the
			// ConfigMap is checked again, and refused if so.
			s.desired.cfgRV = ""
			changed = s.loadConfig() || changed
		}
		s.desired.reserved = reserved
	}
	recomputed := s.sched.dirtySvc || s.sched.dirtyNodes || changed
	if recomputed {
		s.computeEntries()
		s.sched.dirtySvc = false
	}
	if starting {
		s.probeHeldAtStart(locks)
	}
	if s.sched.dirtyNodes || changed {
		s.configureRouter()
	}
	s.sched.dirtyNodes = false
	s.updateEligibility()
	if recomputed || s.sched.dirtyEps {
		// Every IP is decided below.
		s.sched.dirtyEps = false
		s.updateServing(recomputed)
	}
	v := s.view(now)
	s.sched.lastPass, s.sched.passWritable, s.sched.fullUnwritable = now, v.Writable, !v.Writable
	if v.Writable {
		s.self.fenced = false
		s.self.stalled = false
	}
	plan := s.plan(v, locks)
	s.allocate(v, locks)

	// Acquisitions in flight are bounded (see dispatch), so the IPs the
	// policy gives this node, or free ones it ranks first for, go first:
	// it races for the others' only once its own are under way.
	s.sched.first = slices.Grow(s.sched.first[:0], len(s.desired.order))[:len(s.desired.order)]
	for i, m := range s.desired.order {
		var holder string
		if l := locks[m.name]; l != nil {
			holder = l.Holder
		}
		s.sched.first[i] = goesFirst(v, m.ip, holder, plan[m.ip])
	}
	for _, first := range []bool{true, false} {
		for i, m := range s.desired.order {
			if s.sched.first[i] == first {
				s.decide(v, m.ip, m.name, s.book.effective(m.name, locks[m.name]), true, plan[m.ip])
			}
		}
	}
	// In the order listed, not the map's: see reconcileSome.
	for _, l := range all {
		if _, named := s.desired.names[l.Name]; !named {
			s.decideOrphan(v, l, now)
		}
	}
	for ip := range s.binder.bound {
		if _, named := s.desired.entries[ip]; !named {
			if _, locked := locks[lease.NameFor(ip)]; !locked {
				s.carryOut(ip, lease.Decide(v, lease.IP{Addr: ip, Bound: true}))
			}
		}
	}
	if v.Writable {
		s.collectHeartbeats(v)
	}
	s.sched.passVerdicts = s.verdicts(now)
	s.a.opt.Metrics.Held(len(s.binder.bound))
	s.a.opt.Metrics.Managed(len(s.desired.entries))
}

// observe feeds the cached heartbeats to the liveness tracker and returns
// the locks of all by name.
func (s *state) observe(all []*lease.Kept, now time.Time) map[string]*lease.Kept {
	locks := make(map[string]*lease.Kept, len(all))
	for _, l := range all {
		locks[l.Name] = l
	}
	seen := map[string]bool{}
	for _, l := range s.a.heartbeats() {
		hb, err := lease.ParseHeartbeat(l)
		if err != nil {
			continue
		}
		s.live.Observe(hb, now)
		seen[hb.Node] = true
	}
	for _, n := range s.live.Nodes() {
		if !seen[n] {
			s.live.Gone(n, now)
		}
	}
	return locks
}

func (s *state) decide(v lease.View, ip netip.Addr, name string, l *lease.Kept, named bool, planned string) {
	s.writes.unwait(ip)
	s.sched.ipWake.forget(ip)
	lk := s.book.lockOf(ip, l)
	freeSince := s.book.free(ip, lk == nil || lk.Holder == "" || !s.live.Known(lk.Holder), v.Now)
	_, bound := s.binder.bound[ip]
	in := lease.IP{Addr: ip, Lock: lk, Named: named, Bound: bound, FreeSince: freeSince, Planned: planned, Next: s.desired.next[ip], Only: s.serving.onlyFor(ip)}
	s.wireDecide(&in, v.Now)
	d := lease.Decide(v, in)
	if d.Action != lease.Succeed {
		s.wakeHeld(s.succ.end(ip))
	}
	if s.writes.inflight[name] {
		// A successor binds while its write is on its way.
		if d.Action == lease.Succeed && !bound {
			s.succeed(v, ip, lk)
		}
		return
	}
	if (lk == nil || lk.Holder != v.Self) && d.Action != lease.Succeed {
		s.conflicts.forget(ip)
	}
	if d.ReadWritable {
		s.sched.writableDeps[ip] = true
	} else {
		delete(s.sched.writableDeps, ip)
	}
	if named && bound && lk != nil && lk.Holder == v.Self {
		s.rebindIfMoved(ip)
	}
	if d.Action == lease.Succeed && (!bound && !s.succeed(v, ip, lk) || s.holdWrite(ip)) {
		return
	}
	if d.Action.Acquires() {
		var holder string
		if lk != nil {
			holder = lk.Holder
		}
		// Decided again when one in flight completes, those the policy
		// gives this node or that it ranks first for before the others;
		// one whose rank's turn came waits too while any of those does,
		// or it would take the writer they wait for, racing another
		// node for its share (a Lease conflict).
		if first := d.Action == lease.Succeed || goesFirst(v, ip, holder, planned); s.writes.full(v.Now, s.desired.lockWriteTimeout()) || !first && s.writes.waiting.firstWaiting() > 0 {
			s.writes.wait(ip, first)
			return
		}
	}
	s.apply(v, ip, name, l, lk, d)
	if !named {
		s.book.forgetFree(ip)
	}
}

// goesFirst: an acquisition of ip, held by holder ("" if free), is one
// this node makes before the others while its writers are all busy: the
// policy gives it the IP, or nobody live holds it and this node ranks
// first among the live ones. A dead holder's IPs count as free: in a mass
// failover each survivor first takes those it ranks first for, and races
// for the others' only when its own are under way, rather than spending
// its writers on Lease conflicts.
func goesFirst(v lease.View, ip netip.Addr, holder, planned string) bool {
	free := holder == "" || !v.Alive(holder)
	return planned == v.Self || free && lease.Rank(ip, v.Self, v.Live) == 0
}

func (s *state) apply(v lease.View, ip netip.Addr, name string, l *lease.Kept, lk *lease.Lock, d lease.Decision) {
	if !d.At.IsZero() {
		s.sched.wakeIP(ip, d.At)
	}
	e := s.desired.entries[ip]
	w := write{ip: ip, name: name, action: d.Action, timeout: s.desired.lockWriteTimeout()}
	now := s.a.clk.Now()
	switch d.Action {
	case lease.None:
		return
	case lease.Bind:
		s.bindIP(ip, e, d.Reason)
		if d.Successor == "" {
			return
		}
		w.action = lease.NameSuccessor
		w.lease = lease.WithSuccessor(l.Lease(), d.Successor)
	case lease.Unbind:
		s.carryOut(ip, d)
		return
	case lease.Create:
		w.target = v.Self
		w.lease = lease.NewLockLease(s.a.opt.Namespace, ip, v.Self, d.Successor, e.Services, now)
		s.probeEarly(ip, e)
	case lease.Acquire, lease.Succeed:
		w.target = v.Self
		if d.Action == lease.Acquire {
			s.probeEarly(ip, e)
		}
		if lk.Holder != "" {
			w.dead, _ = v.DeadSince(lk.Holder)
			w.from = lk.Holder
		}
		w.lease = lease.WithHolder(l.Lease(), ip, v.Self, d.Successor, e.Services, now)
	case lease.Handoff, lease.Release:
		if _, bound := s.binder.bound[ip]; d.Action == lease.Handoff && !bound {
			// The target binds a handed-off IP without probing, as its
			// holder removed the address first. One this node never bound
			// (in use on the LAN, or still being probed) is released
			// instead, naming the target as a move: it takes the lock at
			// once, as an acquisition, and probes.
			w.action = lease.Release
			w.lease = lease.WithMoveTo(lease.WithHolder(l.Lease(), ip, "", "", e.Services, now), d.Target)
			s.log.Info("releasing an IP not bound here for its new holder to probe", "ip", ip, "node", d.Target, "reason", d.Reason)
			break
		}
		if d.Action == lease.Handoff {
			w.target = d.Target
		}
		if !s.drop(&w, d.Reason) {
			return
		}
		w.lease = lease.WithHolder(l.Lease(), ip, w.target, d.Successor, e.Services, now)
	case lease.Delete:
		if !s.drop(&w, d.Reason) {
			return
		}
		w.rv = l.ResourceVersion
	case lease.ClearMove:
		w.lease = lease.WithMoveTo(l.Lease(), "")
	case lease.NameSuccessor:
		w.lease = lease.WithSuccessor(l.Lease(), d.Successor)
	}
	s.log.Debug("lock write", "ip", ip, "lease", w.name, "action", d.Action, "target", w.target, "reason", d.Reason)
	s.dispatch(w)
}

// plan asks the policy where IPs should be. It also keeps, in next, where
// the policy would put the IPs this node holds or takes were this node
// gone: the successors their locks name (lease.IP.Next), so that a dead
// node's IPs go where the policy wants them without a second move.
func (s *state) plan(v lease.View, locks map[string]*lease.Kept) map[netip.Addr]string {
	holders := map[netip.Addr]string{}
	for _, m := range s.desired.order {
		if s.desired.cfg.Policy != config.PolicySpread && len(s.desired.preferred[m.ip]) == 0 {
			// The sticky plan moves only IPs with a preferred node.
			continue
		}
		holders[m.ip] = s.plannedHolder(v, m.name, s.book.effective(m.name, locks[m.name]))
	}
	in := policy.Input{Policy: s.desired.cfg.Policy, Live: v.Live, Holders: holders, Preferred: s.desired.preferred, Only: s.serving.only}
	plan := policy.Plan(in)
	for ip, h := range holders {
		if h == v.Self {
			holders[ip] = ""
		}
	}
	in.Live = slices.DeleteFunc(slices.Clone(v.Live), func(n string) bool { return n == v.Self })
	s.desired.next = policy.Plan(in)
	return plan
}

// plannedHolder is the holder the policy plans from: the lock's, or the
// one an ownership write in flight names (planning again from the old
// holder would hand off other IPs for a move already under way); "" when
// not live.
func (s *state) plannedHolder(v lease.View, name string, l *lease.Kept) string {
	h, moving := s.writes.pending[name]
	if !moving && l != nil {
		h = l.Holder
	}
	if !slices.Contains(v.Live, h) {
		return ""
	}
	return h
}

// planOne is plan for one IP. Only the sticky plan of an IP depends on
// that IP alone; under spread every pass is a full one (fullDue).
func (s *state) planOne(v lease.View, ip netip.Addr, name string, l *lease.Kept) string {
	in := policy.Input{Policy: s.desired.cfg.Policy, Live: v.Live,
		Holders: map[netip.Addr]string{ip: s.plannedHolder(v, name, l)}, Preferred: map[netip.Addr][]string{ip: s.desired.preferred[ip]}}
	if o, ok := s.serving.only[ip]; ok {
		in.Only = map[netip.Addr]lease.Only{ip: o}
	}
	return policy.Plan(in)[ip]
}

// collectHeartbeats deletes the heartbeats of nodes that are dead and whose
// Node object is gone. The first live eligible node does it.
func (s *state) collectHeartbeats(v lease.View) {
	if len(v.Live) == 0 || v.Live[0] != v.Self {
		return
	}
	for _, l := range s.a.heartbeats() {
		node, ok := lease.NodeOf(l.Name)
		if !ok || v.Alive(node) || s.writes.inflight[l.Name] {
			continue
		}
		if _, err := s.a.nodes.Get(node); !apierrors.IsNotFound(err) {
			continue
		}
		s.log.Info("deleting the heartbeat of a dead node that no longer exists", "node", node, "lease", l.Name)
		s.dispatch(write{name: l.Name, action: lease.Delete, rv: l.ResourceVersion, timeout: s.desired.cfg.LeaseDuration})
	}
}
