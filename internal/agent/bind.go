package agent

import (
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
)

// refusal is why this node does not bind an IP, now, that its lock lets
// it bind: every local reason comes from one gate (mayBind) as a value of
// this type, and the schedule settles the IP by it (schedule.settle):
// when, and on what, the IP is decided again.
type refusal struct {
	why   refusalReason
	until time.Time // when to decide the IP again, if not zero
}

// refusalReason is what a refusal says.
type refusalReason int

const (
	notRefused refusalReason = iota // bound, nothing to bind, or a bind that failed and was reported
	// refusedLate: the loop ran late (loopLate); its next tick on time
	// decides the IP again.
	refusedLate
	// refusedLinkDown, refusedFenced, refusedUnheard, refusedUnwritable:
	// the interface has no carrier, the node fenced, a peer does not hear
	// it over the LAN, or it may not write. Decided again when whether it
	// may write changes, and at until.
	refusedLinkDown
	refusedFenced
	refusedUnheard
	refusedUnwritable
	// refusedProbing: a probe of the LAN runs, or found the address in
	// use; until is its next step.
	refusedProbing
	// refusedSlice: the pass ran for its slice (sliceOver); until is now.
	refusedSlice
)

func (r refusalReason) String() string {
	return [...]string{"bound", "late", "link down", "fenced", "unheard", "not writable", "probing", "slice spent"}[r]
}

// mayBind is the gate every bind passes: it says why this node may not
// bind ip on iface at now, or notRefused. Binding anything new needs the
// interface's carrier, a working API connection (so the lock acted on is
// current) and a loop on time (loopLate); a bind (binding) also needs the
// pass's slice left (sliceOver) and the LAN's probe to have gone
// unanswered (probed), while a probe started early or a move needs
// neither.
func (s *state) mayBind(ip netip.Addr, iface string, now time.Time, binding bool) refusal {
	if binding && s.sched.sliceOver(now, s.desired.cfg.RenewInterval) {
		return refusal{refusedSlice, now}
	}
	if s.self.loopLate(now, s.desired.lateAfter()) {
		return refusal{why: refusedLate}
	}
	notNow := now.Add(s.desired.cfg.RenewInterval)
	switch {
	case s.binder.linkDown[iface]:
		return refusal{refusedLinkDown, notNow}
	case s.self.fenced:
		return refusal{refusedFenced, notNow}
	case s.self.unheard:
		return refusal{refusedUnheard, notNow}
	case !s.writable(now):
		return refusal{refusedUnwritable, notNow}
	}
	if binding {
		if ok, next := s.conflicts.probed(ip, iface, &s.binder); !ok {
			return refusal{refusedProbing, next}
		}
	}
	return refusal{}
}

// bind binds ip, whose lock this node sees as lk, on its interface or
// eipd's device and announces it, or says why not.
func (s *state) bind(ip netip.Addr, e ipset.Entry, lk *lease.Lock, why string) refusal {
	// No s.log.With("ip", ip): a logger per bind cost 3.5 KB, half of
	// what a mass failover's binds allocated.
	iface, err := s.binder.ifaceFor(ip, e.Binding)
	if err != nil {
		s.log.Error("cannot bind: no interface", "ip", ip, "err", err)
		return refusal{}
	}
	if r := s.mayBind(ip, iface, s.clk.Now(), true); r.why != notRefused {
		return r
	}
	p := e.Binding.Prefix(ip)
	dev, onDevice := iface, s.binder.onDevice(iface, p, e.Binding.Announce)
	if onDevice {
		var err error
		if dev, err = s.binder.pickDevice(s.clk.Now()); err != nil {
			s.log.Warn("cannot open another address device; binding on the first until one opens", "ip", ip, "iface", dev, "retryIn", reopenAfter, "err", err)
		}
	}
	b := binding{iface: iface, dev: dev, prefix: p, announce: e.Binding.Announce}
	if err := s.binder.place(ip, b, onDevice, s.desired.lifetimeOn(onDevice)); err != nil {
		s.log.Error("bind", "ip", ip, "iface", dev, "err", err)
		s.events.onIP(ip, corev1.EventTypeWarning, "BindFailed", fmt.Sprintf("bind %s on %s/%s: %v", p, s.node, dev, err))
		return refusal{}
	}
	if b.announce.BGP() {
		b.route = s.routes.announce(ip, e, s.succ.moves(ip, lk))
	}
	s.binder.hold(ip, b)
	s.sched.wakeIPs(s.succ.bound(ip, s.clk.Now()), s.clk.Now())
	s.watch.progressed(s.clk.Now())
	s.metrics.Bound()
	s.log.Info("bound", "ip", ip, "iface", iface, "device", dev, "prefix", p, "reason", why)
	s.events.onIP(ip, corev1.EventTypeNormal, "Bound", fmt.Sprintf("%s bound on %s (%s)", p, s.node, iface))
	return refusal{}
}

// probeEarly starts probing ip as the write that acquires it is sent (see
// addrConflicts).
func (s *state) probeEarly(ip netip.Addr, e ipset.Entry) {
	if iface, err := s.binder.ifaceFor(ip, e.Binding); err == nil && s.mayBind(ip, iface, s.clk.Now(), false).why == notRefused {
		s.conflicts.start(ip, iface, &s.binder)
	}
}

// carryOut carries out a decision about ip's address alone: an Unbind
// unbinds it. Every address this node gives up goes through here, or
// through a hand-off's drop, each the outcome of a lease decision.
func (s *state) carryOut(ip netip.Addr, d lease.Decision) {
	if d.Action == lease.Unbind {
		s.unbind(ip, d.Reason)
	}
}

func (s *state) unbind(ip netip.Addr, why string) {
	b, ok := s.forgetBinding(ip)
	if !ok {
		return
	}
	s.binder.remove(ip, b)
	s.metrics.Unbound()
	s.watch.progressed(s.clk.Now())
	s.log.Info("unbound", "ip", ip, "iface", b.iface, "reason", why)
}

// forgetBinding stops serving ip (route, announcements, lifetime refresh)
// and returns the binding it had; the address itself is left alone.
func (s *state) forgetBinding(ip netip.Addr) (binding, bool) {
	b, ok := s.binder.bound[ip]
	if !ok {
		return b, false
	}
	if b.announce.BGP() {
		// Withdrawn before the address goes and before any lock write
		// that gives the IP away, like the address itself.
		s.routes.withdraw(ip)
	}
	s.binder.forget(ip, b)
	return b, true
}

// rebindIfMoved moves a held, bound address whose interface or prefix
// length changed with the configuration, or whose device changed with
// arp_ignore; the lock is untouched. A move this node may not make now
// waits for it (waits): the IP is decided again when whether this node
// may write changes. r is why the bind after the move did not happen; lk
// is its lock as this node sees it.
func (s *state) rebindIfMoved(ip netip.Addr, lk *lease.Lock) (waits bool, r refusal) {
	b := s.binder.bound[ip]
	e := s.desired.entries[ip]
	iface, err := s.binder.ifaceFor(ip, e.Binding)
	p := e.Binding.Prefix(ip)
	same := err == nil && iface == b.iface && p == b.prefix && e.Binding.Announce == b.announce && s.binder.onDevice(iface, p, e.Binding.Announce) == b.onDevice()
	if err != nil || same || s.mayBind(ip, iface, s.clk.Now(), false).why != notRefused {
		if err == nil {
			if r, changed := s.routes.reannounce(ip, b, e); changed {
				s.binder.rerouted(ip, r)
			}
		}
		return err == nil && !same, refusal{}
	}
	// Not given up: moved, still held, to where the configuration puts it.
	s.unbind(ip, "configuration changed")
	return false, s.bind(ip, e, lk, "configuration changed")
}

// addrEvent restores an address we hold that someone (or an expired
// lifetime) removed.
func (s *state) addrEvent(ev netif.AddrEvent) {
	ip := ev.Prefix.Addr()
	if _, managed := s.desired.entries[ip]; !managed {
		s.binder.addressesChanged() // the node's own addresses define the subnets
	}
	if ev.Added {
		return
	}
	// The first removal of ip reported after an unbind of ours is that
	// unbind's; a busy loop may read it after it bound ip again. It puts
	// back what may be missing, but nothing vanished.
	own := s.binder.ownRemoval(ip)
	b, ok := s.binder.bound[ip]
	if !ok || b.dev != ev.Iface {
		return
	}
	s.addrMissing(b, !own)
}

// addrMissing restores held address b, gone from its device; count says
// it vanished (once until it is back).
func (s *state) addrMissing(b binding, count bool) {
	if count && !b.missing {
		// A deleted device's addresses are reported gone, and missing
		// again at the resync that restores them.
		s.metrics.Vanished()
		b.missing = true
		s.binder.update(b)
	}
	if s.self.loopLate(s.clk.Now(), s.desired.lateAfter()) {
		// Its lifetime ran out because this loop ran late (a long pass, a
		// starved process): it renewed nothing meanwhile, and a peer may
		// have taken the IP over. Putting it back now would bind it on two
		// live nodes. It is decided again once the loop is on time, and
		// bound again if the lock still names this node.
		s.forgetBinding(b.prefix.Addr())
		s.sched.settle(b.prefix.Addr(), settling{keepDeps: true, refusal: refusal{why: refusedLate}})
		s.log.Debug("an address this node held expired while its loop ran late; binding it again only if its lock still names this node", "ip", b.prefix.Addr(), "iface", b.dev)
		return
	}
	s.binder.restore(b, s.desired.lifetimeOn(b.onDevice()))
}

// linkEvent: a link that loses carrier loses its addresses at once, and
// binds nothing again until this node re-read the locks after it returned.
func (s *state) linkEvent(ev netif.LinkEvent) {
	if s.binder.restoreDevice(ev) {
		return
	}
	s.binder.linkChanged()
	s.sched.askFull()
	if !ev.Up {
		if !s.binder.wentDown(ev.Iface) {
			return
		}
		for ip, b := range s.binder.bound {
			if b.iface == ev.Iface {
				s.carryOut(ip, lease.DecideLinkDown())
			}
		}
		return
	}
	if s.binder.cameUp(ev.Iface) {
		if lanLink(ev.Iface, s.desired.cfg.Ranges, &s.binder, s.binder.bound) {
			s.self.reread()
			s.log.Info("link has carrier again; re-reading locks before binding", "iface", ev.Iface)
		}
	}
}

// resync compares the interfaces with what we hold: restores missing
// addresses and removes addresses inside our ranges that we do not hold. At
// start-up an address whose lock still names us is left alone; the first
// pass that may bind will refresh it.
func (s *state) resync(startup bool) {
	s.sched.resynced(s.clk.Now())
	s.routes.retry(s.desired.cfg)
	if s.ports.failed {
		s.sched.inputChanged(inServices) // the next pass applies the port filter again
	}
	if s.binder.checkARP() {
		s.sched.askFull()
	}
	ifaces := s.binder.resyncIfaces(&s.desired)
	var heldByLock map[netip.Addr]bool // read at start-up only
	if startup {
		heldByLock = heldBy(s.leases.allLocks(), s.node)
	}
	// An address in the ranges that this node does not hold is stale, but
	// for a reserved one and, at start-up, one its lock names this node for.
	stale := func(ip netip.Addr) bool {
		_, inRange := s.desired.cfg.Lookup(ip)
		return inRange && s.desired.reserved[ip] == "" && !(startup && heldByLock[ip])
	}
	for iface, bound := range ifaces {
		for _, b := range s.binder.sweep(iface, bound, stale) {
			s.addrMissing(b, true)
		}
	}
}

// heldBy returns the IPs whose lock among locks names node. Reading every
// lock is most of a resync's own work at 10,000 IPs, and only the one at
// start-up needs it.
func heldBy(locks []*lease.Kept, node string) map[netip.Addr]bool {
	held := map[netip.Addr]bool{}
	for _, l := range locks {
		if l.Err == nil && l.Holder == node {
			held[l.IP] = true
		}
	}
	return held
}
