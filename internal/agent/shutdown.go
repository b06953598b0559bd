package agent

import (
	"net/netip"

	"github.com/eip-project/eip/internal/lease"
)

func (s *state) shutdown() error {
	s.elig.shutDown()
	now := s.clk.Now()
	v := s.view(now)
	s.log.Info("shutting down: handing off what this node holds")
	s.book.newPass(s.leases.leasesSeen(), false)
	locks := observe(s.live, s.leases.heartbeats(), s.leases.allLocks(), now)
	if v.Writable {
		// Peers must see this node leave before they see its handoffs
		// (the watch delivers Leases in the order they were written), or
		// a policy that still counts it live hands IPs back to it.
		if err := s.hbLine.exchange(s.renewal(s.clk.Now()), s.clk, 2*s.desired.cfg.LeaseDuration); err != nil {
			s.log.Warn("announce shutdown in the heartbeat", "err", err)
		}
	}
	// This node is out of v.Live now: the policy places its IPs as if
	// they were free (spread: in balance), and rank decides the rest.
	seen := s.book.resolvePass(s.desired.order, s.desired.names, locks)
	plan := s.desired.plan(v, seen, s.serving.only, s.writes.pending)
	held := s.book.heldAtStop(v, s.desired.order, seen, s.writes.inflight)
	// Each IP is unbound just before its hand-off is sent, and no more are
	// in flight than there are writers: queued all at once, the last of
	// thousands would wait dark for the writes before them, and those
	// beyond the writers' queue would never be sent at all. A stop gives
	// up once no write came back for two lease durations; peers then take
	// what is left as from a dead node.
	idle := 2 * s.desired.cfg.LeaseDuration
	quiet := s.clk.NewTimer(idle)
	defer quiet.Stop()
	for next := 0; next < len(held) || len(s.writes.inflight) > 0; {
		for ; next < len(held) && s.writes.dropping < s.a.opt.Writers; next++ {
			s.handOff(v, plan, s.desired.order[held[next]], seen[held[next]])
		}
		select {
		case r := <-s.writes.results:
			s.writeDone(r)
			quiet.Reset(idle)
		case <-quiet.C():
			s.log.Warn("gave up waiting for handoffs", "pending", len(s.writes.inflight), "unsent", len(held)-next)
			s.writes.abandon()
			next = len(held)
		}
	}
	for ip := range s.binder.bound {
		s.carryOut(ip, lease.DecideStopped())
	}
	for _, cancel := range s.binder.claimWatch {
		cancel()
	}
	if err := s.hbLine.exchange(renewal{remove: true, timeout: s.desired.cfg.LeaseDuration}, s.clk, 2*s.desired.cfg.LeaseDuration); err != nil {
		s.log.Warn("delete heartbeat", "err", err)
	}
	s.lan.close()
	s.self.lanClosed()
	s.log.Info("stopped")
	return nil
}

// handOff gives m, held by this node with lock l, to the node plan names,
// or to the best-ranked live peer; with none, it releases it.
func (s *state) handOff(v lease.View, plan map[netip.Addr]string, m managed, l *lease.Kept) {
	lk := s.book.lockOf(m.ip, l)
	t := plan[m.ip]
	if t == "" {
		t = v.BestPeer(m.ip)
	}
	d := lease.Decision{Action: lease.Release, Reason: "shutting down; no live eligible peer"}
	if t != "" {
		d = lease.Decision{Action: lease.Handoff, Target: t, Successor: v.SuccessorOf(m.ip, t), Reason: "shutting down"}
	}
	s.apply(v, m.ip, m.name, l, lk, d)
}
