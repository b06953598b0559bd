package agent

import (
	"net/netip"

	"github.com/eip-project/eip/internal/lease"
)

// The loop's steps in carrying a decision out that are not a part's own
// work: a successor's bind before its write, a write handed to the
// writers (and the bind given up just before it), the moves a route
// carries, and the allocation pass of a full pass.

// succeed binds ip as the successor its lock names, before any write says
// so: it probes first, as for any takeover, and binds once nobody
// answers, never while an eip node does. A probe of another eip node for
// the same IP means two nodes each believe they may take it (a lock whose
// successor changed that one of them has not seen yet): neither binds
// before the lock names it.
//
// It reports whether the write naming this node goes now. It waits for
// the bind (successions.bound asks for it then) while the probe runs unanswered:
// in a mass failover the API server's work for thousands of writes took
// the CPU the binds needed, on the two cores they shared. It goes at once
// when the bind waits for it: a contest, an eip node still answering (a
// holder alive but late, which lets go once the lock names another), or a
// stranger answering.
//
// r is why the bind did not happen, if it did not.
func (s *state) succeed(v lease.View, ip netip.Addr, lk *lease.Lock) (write bool, r refusal) {
	sc, begun := s.succ.begin(ip, v, lk.Holder)
	if begun {
		s.conflicts.probeFirst(ip)
	}
	write = sc.contested
	if !write {
		r = s.bind(ip, s.desired.entries[ip], lk, "successor of "+lk.Holder+", judged dead")
		// Bound, or a stranger answers (this node keeps the lock and
		// reports the conflict, as any node taking an IP over does), or
		// an eip node does.
		_, bound := s.binder.bound[ip]
		write = bound || s.conflicts.answering(ip)
	}
	s.sched.wakeIPs(s.succ.setBinding(ip, !write), s.clk.Now())
	return write, r
}

// dispatch hands a write to the writers. At most as many acquisitions as
// there are writers are in flight: the rest are decided again, on fresher
// information, when one completes, rather than queued on a view that may
// be seconds old by the time a writer gets to them (a thousand free IPs
// at a cold start, each also raced by the next-ranked node).
func (s *state) dispatch(w write) {
	now := s.clk.Now()
	if s.writes.send(w, now, s.desired.lockWriteTimeout()) == queueFull {
		// The next pass tries again.
		s.sched.wakeIP(w.ip, now.Add(s.desired.cfg.RankStep()))
	}
}

// drop unbinds w's IP, if bound, before w is dispatched, and reports
// whether w may go. While as many writes whose IP was unbound first are in
// flight as there are writers, a bound IP waits, bound, and is decided
// again when one of them comes back: at most a writer's worth of IPs are
// dark at a time, and the rest stay bound if the node is heard again
// before their turn (design-notes.md, "Dropping a writer's worth at a
// time"). A stop keeps to the same bound (shutdown).
func (s *state) drop(w *write, why string) bool {
	if _, bound := s.binder.bound[w.ip]; !bound {
		return true
	}
	if !s.writes.mayDrop(w.ip) {
		return false
	}
	s.unbind(w.ip, why)
	w.drops = true
	return true
}
