package agent

import (
	"net/netip"
	"time"

	"github.com/eip-project/eip/internal/lease"
)

// succession is an IP this node binds as its lock's successor (succeed).
type succession struct {
	dead time.Time // when its holder was judged dead; zero if unknown
	// contested: another eip node probed for the IP while this one did.
	// It binds only once the lock names it (docs/design.md, Succession).
	contested bool
	// binding: its write waits for its bind (succeed returned false).
	binding bool
}

// successions are the IPs this node binds as their lock's successor
// before its write names it, and the writes of those bound that wait for
// the others' binds.
//
// A bound successor's write waits while another of its successions is
// still binding, for at most one lease duration from the first write
// held: in a mass failover each write cost the API server a millisecond
// of the CPU that the binds of every survivor needed, on a machine whose
// cores they share, and the traffic flows before any write.
type successions struct {
	succeeding map[netip.Addr]succession
	binding    int // entries of succeeding with binding set
	// held are bound successions whose writes wait, since heldSince.
	held      map[netip.Addr]bool
	heldSince time.Time
}

// succeed binds ip as the successor its lock names, before any write says
// so: it probes first, as for any takeover, and binds once nobody
// answers, never while an eip node does. A probe of another eip node for
// the same IP means two nodes each believe they may take it (a lock whose
// successor changed that one of them has not seen yet): neither binds
// before the lock names it.
//
// It reports whether the write naming this node goes now. It waits for
// the bind (succeeded asks for it then) while the probe runs unanswered:
// in a mass failover the API server's work for thousands of writes took
// the CPU the binds needed, on the two cores they shared. It goes at once
// when the bind waits for it: a contest, an eip node still answering (a
// holder alive but late, which lets go once the lock names another), or a
// stranger answering.
func (s *state) succeed(v lease.View, ip netip.Addr, lk *lease.Lock) (write bool) {
	sc, ok := s.succ.succeeding[ip]
	if !ok {
		sc.dead, _ = v.DeadSince(lk.Holder)
		s.succ.succeeding[ip] = sc
		s.conflicts.fresh[ip] = true
	}
	write = s.bindAsSuccessor(ip, lk, sc)
	if _, ok := s.succ.succeeding[ip]; ok {
		s.setBinding(ip, !write)
	}
	return write
}

func (s *state) bindAsSuccessor(ip netip.Addr, lk *lease.Lock, sc succession) (write bool) {
	if sc.contested {
		return true
	}
	s.bindIP(ip, s.desired.entries[ip], "successor of "+lk.Holder+", judged dead")
	if _, bound := s.binder.bound[ip]; bound {
		return true
	}
	if _, inUse := s.conflicts.inUse[ip]; inUse {
		// A stranger answers: this node keeps the lock and reports the
		// conflict, as any node taking an IP over does.
		return true
	}
	p, probing := s.conflicts.probing[ip]
	return probing && !p.peerSince.IsZero()
}

// setBinding records whether the write of succession ip waits for its
// bind, and releases the held writes once none does.
func (s *state) setBinding(ip netip.Addr, binding bool) {
	sc := s.succ.succeeding[ip]
	if sc.binding != binding {
		sc.binding = binding
		s.succ.succeeding[ip] = sc
		if binding {
			s.succ.binding++
		} else {
			s.succ.binding--
		}
	}
	s.releaseHeld()
}

// endSuccession forgets succession ip: bound, or no longer one.
func (s *state) endSuccession(ip netip.Addr) {
	if sc, ok := s.succ.succeeding[ip]; ok {
		if sc.binding {
			s.succ.binding--
		}
		delete(s.succ.succeeding, ip)
		s.releaseHeld()
	}
}

// holdWrite says whether the write of succession ip, if bound, waits for
// the others' binds (successions), and holds it if so.
func (s *state) holdWrite(ip netip.Addr) bool {
	now := s.a.clk.Now()
	if _, bound := s.binder.bound[ip]; !bound || s.succ.binding == 0 || len(s.succ.held) > 0 && !now.Before(s.succ.heldSince.Add(s.desired.cfg.LeaseDuration)) {
		return false
	}
	if len(s.succ.held) == 0 {
		s.succ.heldSince = now
	}
	s.succ.held[ip] = true
	s.sched.wakeIP(ip, s.succ.heldSince.Add(s.desired.cfg.LeaseDuration))
	return true
}

// releaseHeld decides the held writes again once no succession is binding.
func (s *state) releaseHeld() {
	if s.succ.binding > 0 || len(s.succ.held) == 0 {
		return
	}
	now := s.a.clk.Now()
	for ip := range s.succ.held {
		s.sched.wakeIP(ip, now)
	}
	clear(s.succ.held)
}

// succeeded records a bind as a successor: its failover ends here, not
// when the write naming this node comes back, which it asks for now.
func (s *state) succeeded(ip netip.Addr) {
	sc, ok := s.succ.succeeding[ip]
	if !ok {
		return
	}
	s.endSuccession(ip)
	s.sched.wakeIP(ip, s.a.clk.Now())
	if !sc.dead.IsZero() {
		after := s.a.clk.Now().Sub(sc.dead)
		s.a.opt.Metrics.Failover(after)
		s.log.Info("took over from a dead holder as its successor", "ip", ip, "after", after)
	}
}

// contest marks a succession whose probe met another eip node's.
func (s *state) contest(ip netip.Addr) {
	if sc, ok := s.succ.succeeding[ip]; ok && !sc.contested {
		sc.contested = true
		s.succ.succeeding[ip] = sc
		s.log.Info("another eip node probes for an IP this node succeeds to; binding it only once the lock names this node", "ip", ip)
	}
}

// probeHeldAtStart makes the first bind of each IP whose lock names this
// node, found so at start, wait for a probe: a successor may have bound
// it while this node was dead and not yet written the lock
// (docs/design.md, Succession). It binds at the first unanswered probe,
// and never while an eip node answers.
func (s *state) probeHeldAtStart(locks map[string]*lease.Kept) {
	for name, l := range locks {
		ip, named := s.desired.names[name]
		if !named || l.Holder != s.a.opt.Node || l.Successor == "" {
			continue
		}
		if _, bound := s.binder.bound[ip]; !bound {
			s.conflicts.fresh[ip] = true
		}
	}
}
