package agent

import (
	"maps"
	"net/netip"
	"time"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// reconcileSome decides again the dirty IPs, those whose own decision
// time came, and as many waiting acquisitions as there is room for, those
// that go first first. TestIncrementalPassDecidesAsTheFullPass checks that a full pass
// after it would act not at all.
func (s *state) reconcileSome(now time.Time) {
	s.sched.startPass(now)
	s.book.newPass(s.leases.leasesSeen(), false)
	s.fence(now)
	v := s.view(now)
	if v.Writable {
		s.self.writesAgain()
	}
	dirty := s.sched.dirtyInOrder(now)
	for i, ip := range dirty {
		if s.sched.sliceOver(s.clk.Now(), s.desired.cfg.RenewInterval) {
			// The slice is spent: the rest are decided in the next pass,
			// once the loop has answered its inputs, as a bind that
			// yields is. Deciding each of them only for its bind to yield
			// cost a successor of 1,700 IPs a decision per IP left and
			// slice.
			s.sched.wakeIPs(dirty[i:], now)
			break
		}
		s.decideOne(v, ip, now)
	}
	s.sched.dirtyDecided()
	s.writes.admitWaiting(now, s.desired.lockWriteTimeout(), func(ip netip.Addr) { s.decideOne(v, ip, now) })
	s.metrics.Held(len(s.binder.bound))
}

// decideOne decides one IP as the full pass would.
func (s *state) decideOne(v lease.View, ip netip.Addr, now time.Time) {
	name := lease.NameFor(ip)
	cached := s.leases.lock(name)
	if _, named := s.desired.entries[ip]; named {
		l := s.book.effective(name, cached)
		s.decide(v, ip, name, l, true, s.desired.planOne(v, ip, name, l, s.serving.only, s.writes.pending))
		return
	}
	s.writes.unwait(ip)
	s.sched.deciding(ip)
	if cached != nil {
		s.decideOrphan(v, s.book.effective(cached.Name, cached), now)
	} else if _, bound := s.binder.bound[ip]; bound {
		s.carryOut(ip, lease.Decide(v, lease.IP{Addr: ip, Bound: true}))
	}
}

// decideOrphan decides l, the lock of an IP no Service names as this node
// sees it (nil: gone).
func (s *state) decideOrphan(v lease.View, l *lease.Kept, now time.Time) {
	if l == nil {
		return
	}
	if l.Err != nil {
		s.book.warnBadLock(l, "no Service names its IP, so it is ignored")
		return
	}
	if spared, wake := s.alloc.spared(l, &s.desired, now); spared {
		if !wake.IsZero() {
			s.sched.wakeFull(wake)
		}
		return
	}
	s.decide(v, l.IP, l.Name, l, false, "")
}

// reconcile is one pass over everything; it is idempotent.
func (s *state) reconcile() {
	now := s.clk.Now()
	s.sched.startPass(now)
	s.book.newPass(s.leases.leasesSeen(), true)
	s.sched.newFullPass()
	s.writes.newPass()
	s.wire.keep(func(ip netip.Addr) bool {
		_, named := s.desired.entries[ip]
		return named
	})
	s.binder.listenOnly(func(ip netip.Addr) bool {
		_, probing := s.conflicts.probing[ip]
		_, bound := s.binder.bound[ip]
		return probing || bound || s.wire.tracks(ip)
	})
	s.fence(now)
	all, locks := s.readInputs(now)
	v := s.view(now)
	s.sched.fullPassRead(now, v.Writable)
	if v.Writable {
		s.self.writesAgain()
	}
	s.decideAll(v, all, locks, now)
	if v.Writable {
		for _, l := range s.gone.collectable(v, s.leases.heartbeats(), s.writes.inflight) {
			s.dispatch(write{name: l.Name, action: lease.Delete, rv: l.ResourceVersion, timeout: s.desired.cfg.LeaseDuration})
		}
	}
	s.sched.judged(verdictsOf(s.live, now))
	s.metrics.Held(len(s.binder.bound))
	s.metrics.Managed(len(s.desired.entries))
	s.metrics.Ranges(ipset.RangeUsage(s.desired.cfg, maps.Values(s.desired.entries), s.desired.reserved, func(ip netip.Addr) bool {
		_, bound := s.binder.bound[ip]
		return bound
	}))
}

// readInputs reads again, for a full pass at now, what changed of the
// inputs every IP reads (the configuration, the Nodes, the Services,
// the EndpointSlices), and the locks and heartbeats: all the locks in the
// order the cache lists them, and by name.
func (s *state) readInputs(now time.Time) (all []*lease.Kept, locks map[string]*lease.Kept) {
	cm, svc, nodes, eps := s.sched.takeInputs()
	changed := false
	if cm {
		changed = s.configs.load(&s.desired, s.lastGood, s.live)
		s.lifetime.configure(s.desired.cfg)
		s.configureLAN()
	}
	all = s.leases.allLocks()
	locks = observe(s.live, s.leases.heartbeats(), all, now)
	if nodes {
		reserved := s.a.reservedAddresses()
		if s.desired.reserved != nil && !maps.Equal(reserved, s.desired.reserved) {
			// A range may now contain an address never to be bound: the
			// ConfigMap is checked again, and refused if so.
			s.desired.recheck()
			changed = s.configs.load(&s.desired, s.lastGood, s.live) || changed
		}
		s.desired.reserve(reserved)
	}
	recomputed := svc || nodes || changed
	if recomputed {
		s.computeEntries()
	}
	if s.sched.lastPass.IsZero() {
		s.conflicts.probeHeldAtStart(locks, s.desired.names, s.binder.bound)
	}
	if nodes || changed {
		s.routes.configure(s.desired.cfg)
	}
	s.elig.judge(&s.desired, s.self.unheard, s.lan.lanPort)
	if recomputed || eps {
		// Every IP is decided below.
		s.serving.update(recomputed, &s.desired, s.binder.bound, s.view)
	}
	return all, locks
}

// decideAll decides every IP of a full pass, each lock worked out once
// (resolvePass): the managed IPs, those that go first first, then the
// orphans' locks, then the bound IPs nothing names or locks.
func (s *state) decideAll(v lease.View, all []*lease.Kept, locks map[string]*lease.Kept, now time.Time) {
	seen := s.book.resolvePass(s.desired.order, s.desired.names, locks)
	defer s.book.passDone()
	plan := s.desired.plan(v, seen, s.serving.only, s.writes.pending)
	// One allocation pass over the Services; the new addresses a Service
	// is given are probed on the LAN first (candidatesFree).
	if wake := s.alloc.pass(v, &s.desired, locks, s.book.eachSeen, &s.conflicts, &s.binder); !wake.IsZero() {
		s.sched.wakeFull(wake)
	}
	// Acquisitions in flight are bounded (see dispatch), so the IPs the
	// policy gives this node, or free ones it ranks first for, go first:
	// it races for the others' only once its own are under way.
	order := s.desired.order
	goesFirst := s.sched.goFirst(len(order), func(i int) bool {
		var holder string
		if l := locks[order[i].name]; l != nil {
			holder = l.Holder
		}
		return goesFirst(v, order[i].ip, holder, plan[order[i].ip])
	})
	for _, first := range []bool{true, false} {
		for i, m := range order {
			if goesFirst[i] == first {
				s.decide(v, m.ip, m.name, seen[i], true, plan[m.ip])
			}
		}
	}
	// In the order listed, not the map's: see reconcileSome.
	for _, l := range all {
		if _, named := s.desired.names[l.Name]; !named {
			s.decideOrphan(v, s.book.other(l.Name), now)
		}
	}
	for ip := range s.binder.bound {
		if _, named := s.desired.entries[ip]; !named {
			if _, locked := locks[lease.NameFor(ip)]; !locked {
				s.carryOut(ip, lease.Decide(v, lease.IP{Addr: ip, Bound: true}))
			}
		}
	}
}

// observe feeds the heartbeats hbs to the liveness tracker live at now,
// marks gone the nodes it knows without one, and returns the locks of all
// by name.
func observe(live *lease.Liveness, hbs []*coordinationv1.Lease, all []*lease.Kept, now time.Time) map[string]*lease.Kept {
	locks := make(map[string]*lease.Kept, len(all))
	for _, l := range all {
		locks[l.Name] = l
	}
	seen := map[string]bool{}
	for _, l := range hbs {
		hb, err := lease.ParseHeartbeat(l)
		if err != nil {
			continue
		}
		live.Observe(hb, now)
		seen[hb.Node] = true
	}
	for _, n := range live.Nodes() {
		if !seen[n] {
			live.Gone(n, now)
		}
	}
	return locks
}

// decide decides ip, whose lock l this node sees (nil: none), in four
// steps: the facts, lease.Decide, carrying the decision out, and the
// schedule settling the IP by what that left.
func (s *state) decide(v lease.View, ip netip.Addr, name string, l *lease.Kept, named bool, planned string) {
	s.writes.unwait(ip)
	s.sched.deciding(ip)
	lk := s.book.lockOf(ip, l)
	freeSince := s.book.free(ip, lk == nil || lk.Holder == "" || !s.live.Known(lk.Holder), v.Now)
	_, bound := s.binder.bound[ip]
	in := lease.IP{Addr: ip, Lock: lk, Named: named, Bound: bound, FreeSince: freeSince, Planned: planned, Next: s.desired.next[ip], Only: s.serving.onlyFor(ip),
		Unrecorded: named && lk != nil && !recordsOwner(lk, s.desired.entries[ip].Owner)}
	s.wire.decide(&in, s.desired.entries[ip].Binding, s.binder.bound[ip].iface, s.live, &s.binder, v.Now)
	d := lease.Decide(v, in)
	s.sched.settle(ip, s.carry(v, in, name, l, d))
}

// carry carries out decision d about the IP in, whose lock l this node
// sees, and says what the schedule settles.
func (s *state) carry(v lease.View, in lease.IP, name string, l *lease.Kept, d lease.Decision) settling {
	ip, lk := in.Addr, in.Lock
	if d.Action != lease.Succeed {
		s.sched.wakeIPs(s.succ.end(ip), v.Now)
	}
	if s.writes.inflight[name] {
		// A successor binds while its write is on its way.
		st := settling{keepDeps: true}
		if d.Action == lease.Succeed && !in.Bound {
			_, st.refusal = s.succeed(v, ip, lk)
		}
		return st
	}
	if (lk == nil || lk.Holder != v.Self) && d.Action != lease.Succeed {
		s.conflicts.forget(ip)
	}
	st := settling{readWritable: d.ReadWritable}
	if in.Named && in.Bound && lk != nil && lk.Holder == v.Self {
		var waits bool
		waits, st.refusal = s.rebindIfMoved(ip, lk)
		st.readWritable = st.readWritable || waits
	}
	if d.Action == lease.Succeed {
		if !in.Bound {
			var write bool
			if write, st.refusal = s.succeed(v, ip, lk); !write {
				return st
			}
		}
		// Its write may wait for the other successions' binds.
		_, bound := s.binder.bound[ip]
		if until, held := s.succ.hold(ip, bound, s.clk.Now(), s.desired.cfg.LeaseDuration); held {
			s.sched.wakeIP(ip, until)
			return st
		}
	}
	if d.Action.Acquires() {
		var holder string
		if lk != nil {
			holder = lk.Holder
		}
		first := d.Action == lease.Succeed || goesFirst(v, ip, holder, in.Planned)
		if s.writes.waitsForRoom(ip, first, v.Now, s.desired.lockWriteTimeout()) {
			return st
		}
	}
	st.at = d.At
	if r := s.apply(v, ip, name, l, lk, d); r.why != notRefused {
		st.refusal = r
	}
	if !in.Named {
		s.book.forgetFree(ip)
	}
	return st
}

// recordsOwner says whether lk records o as the owner of its IP.
func recordsOwner(lk *lease.Lock, o ipset.Owner) bool {
	return lk.Owner == o.Service && lk.OwnerUID == o.UID
}

// goesFirst: an acquisition of ip, held by holder ("" if free), is one
// this node makes before the others while its writers are all busy: the
// policy gives it the IP, or nobody live holds it and this node ranks
// first among the live ones. A dead holder's IPs count as free: in a mass
// failover each survivor first takes those it ranks first for, and races
// for the others' only when its own are under way, rather than spending
// its writers on Lease conflicts.
func goesFirst(v lease.View, ip netip.Addr, holder, planned string) bool {
	free := holder == "" || !v.Keeps(holder)
	return planned == v.Self || free && lease.Rank(ip, v.Self, v.Live) == 0
}

// apply carries out d about ip: binds or unbinds it, or sends the lock
// write d asks for. It says why a bind did not happen, if it did not.
func (s *state) apply(v lease.View, ip netip.Addr, name string, l *lease.Kept, lk *lease.Lock, d lease.Decision) refusal {
	var r refusal
	switch d.Action {
	case lease.None:
		return r
	case lease.Bind:
		if r = s.bind(ip, s.desired.entries[ip], lk, d.Reason); d.Successor == "" {
			return r
		}
	case lease.Unbind:
		s.carryOut(ip, d)
		return r
	}
	if w, ok := s.lockWrite(v, ip, name, l, lk, d); ok {
		s.log.Debug("lock write", "ip", ip, "lease", w.name, "action", d.Action, "target", w.target, "reason", d.Reason)
		s.dispatch(w)
	}
	return r
}

// lockWrite is the write of ip's lock that d asks for, once the address
// is unbound if the write gives it away (drop); ok is false when it may
// not go yet.
func (s *state) lockWrite(v lease.View, ip netip.Addr, name string, l *lease.Kept, lk *lease.Lock, d lease.Decision) (w write, ok bool) {
	e := s.desired.entries[ip]
	w = write{ip: ip, name: name, action: d.Action, timeout: s.desired.lockWriteTimeout()}
	now := s.clk.Now()
	switch d.Action {
	case lease.Bind, lease.NameSuccessor:
		w.action = lease.NameSuccessor
		w.lease = lease.WithSuccessor(l.Lease(), d.Successor)
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
			w.dead, _ = v.LostSince(lk.Holder)
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
			return w, false
		}
		w.lease = lease.WithHolder(l.Lease(), ip, w.target, d.Successor, e.Services, now)
	case lease.Delete:
		if !s.drop(&w, d.Reason) {
			return w, false
		}
		w.rv = l.ResourceVersion
	case lease.ClearMove:
		w.lease = lease.WithMoveTo(l.Lease(), "")
	case lease.RecordOwner:
		w.lease = l.Lease()
	}
	if w.lease != nil && e.Owner.Service != "" {
		// Every write of a named IP's lock records its owner.
		w.lease = lease.WithOwner(w.lease, e.Owner.Service, e.Owner.UID)
	}
	return w, true
}
