package agent

import (
	"fmt"
	"time"

	"github.com/eip-project/eip/internal/lease"
	corev1 "k8s.io/api/core/v1"
)

// lockWriteTimeout is how long a lock write may take: twice the lease
// duration, at least 4 s. A write that times out at its writer may still
// be carried out, and is taken for congestion (the window halves). When a
// node of fifty died, their API server answered the takeovers in up to
// 2.4 s, and with the lease duration (2 s) as the timeout half of them
// timed out, 23 after the API server had taken them: their nodes' windows
// fell to one at a time, with pauses, and each sent the write again on
// the lock it had read, a certain conflict.
func (s *state) lockWriteTimeout() time.Duration {
	return max(2*s.desired.cfg.LeaseDuration, 4*time.Second)
}

// dispatch hands a write to the writers. At most as many acquisitions as
// there are writers are in flight: the rest are decided again, on fresher
// information, when one completes, rather than queued on a view that may
// be seconds old by the time a writer gets to them (a thousand free IPs
// at a cold start, each also raced by the next-ranked node).
func (s *state) dispatch(w write) {
	acquisition := w.action.Acquires()
	now := s.a.clk.Now()
	if acquisition && s.acquisitionsFull(now) {
		return
	}
	w.round = s.writes.sent
	select {
	case s.writes.jobs <- w:
		s.writes.inflight[w.name] = true
		if acquisition {
			s.writes.window = s.windowAt(now)
			s.writes.acquiring++
			s.writes.sent++
		}
		if w.drops {
			s.writes.dropping++
		}
		switch w.action {
		case lease.Create, lease.Acquire, lease.Succeed, lease.Handoff, lease.Release:
			s.writes.pending[w.name] = w.target
		}
	default:
		// The queue is full; the next pass tries again.
		s.sched.wakeIP(w.ip, now.Add(s.desired.cfg.RankStep()))
	}
}

// acquisitionsFull: no acquisition may be sent now (congestion).
func (s *state) acquisitionsFull(now time.Time) bool {
	w := s.windowAt(now)
	if w < 1 {
		return s.writes.acquiring > 0 || now.Before(s.writes.paceUntil)
	}
	return s.writes.acquiring >= min(int(w), s.a.opt.Writers)
}

// windowAt is the window of acquisitions in flight at now: slowStart
// after a quiet spell, a lock write's timeout with none in flight and no
// pause, since what the API server answered before says little of what it
// answers now (design-notes.md, "The window of acquisitions").
func (s *state) windowAt(now time.Time) float64 {
	if s.writes.acquiring == 0 && !now.Before(s.writes.paceUntil) && now.Sub(later(s.writes.idleSince, s.writes.paceUntil)) >= s.lockWriteTimeout() {
		return slowStart
	}
	return s.writes.window
}

// congestion adapts the window of acquisitions in flight to what the API
// server answers, as TCP adapts its window to the network: halved by an
// acquisition that failed without an answer (a timeout, an overloaded or
// unreachable server), once for those sent before it was last halved, and
// widened by each answered one, lost races included: doubled below one,
// one wider above, up to the writers. Halved for each of the writes a
// stalled API server let time out together, a window of 32 would be at a
// quarter at once.
//
// Below one, a node sends one acquisition at a time and, after one that
// timed out, waits so that it has one in flight for a window's share of
// the time: a write's timeout (1/window - 1) times, since many nodes with
// one each in flight can still be more than their API server answers
// (design-notes.md, "The window of acquisitions").
func (s *state) congestion(r writeResult, now time.Time) {
	writers := float64(s.a.opt.Writers)
	if r.err != nil && !rewritten(r.err) {
		if r.round < s.writes.cut {
			return
		}
		s.writes.cut = s.writes.sent
		s.writes.window = max(minWindow, min(s.writes.window, writers)/2)
		if s.writes.window < 1 {
			s.writes.paceUntil = now.Add(time.Duration(float64(s.lockWriteTimeout()) * (1/s.writes.window - 1)))
		}
		return
	}
	s.writes.window = min(writers, s.writes.window+min(s.writes.window, 1))
	s.writes.paceUntil = time.Time{}
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
	if s.writes.dropping >= s.a.opt.Writers {
		s.writes.dropWaiting[w.ip] = true
		return false
	}
	delete(s.writes.dropWaiting, w.ip)
	s.unbind(w.ip, why)
	w.drops = true
	return true
}

func (s *state) writeDone(r writeResult) {
	if r.ip.IsValid() {
		s.sched.dirty[r.ip] = true
	}
	delete(s.writes.inflight, r.name)
	if r.action.Acquires() {
		s.writes.acquiring--
		if s.writes.acquiring == 0 {
			s.writes.idleSince = s.a.clk.Now()
		}
		s.congestion(r, s.a.clk.Now())
	}
	if r.drops {
		s.writes.dropping--
		for ip := range s.writes.dropWaiting {
			s.sched.dirty[ip] = true
		}
		clear(s.writes.dropWaiting)
	}
	delete(s.writes.pending, r.name)
	// The write's identity in each line, not a logger of its own
	// (s.log.With), which cost kilobytes a write in a mass failover.
	id := []any{"ip", r.ip, "lease", r.name}
	if r.err != nil {
		if rewritten(r.err) {
			s.a.opt.Metrics.Conflict()
			s.log.Debug("lock write lost a race", append(id, "action", r.action, "err", r.err)...)
			return
		}
		s.a.opt.Metrics.APIError(r.action.String())
		s.log.Warn("lock write failed", append(id, "action", r.action, "err", r.err)...)
		return
	}
	now := s.a.clk.Now()
	if r.action == lease.Delete {
		s.book.deleted[r.name] = r.rv
		delete(s.book.written, r.name)
		s.log.Info("deleted lock", id...)
		return
	}
	s.book.written[r.name] = lease.Keep(r.out, nil)
	switch r.action {
	case lease.Create, lease.Acquire, lease.Succeed:
		takeover := !r.dead.IsZero()
		s.a.opt.Metrics.Acquired(takeover)
		switch {
		case r.action == lease.Succeed:
			// Its failover was counted when it was bound (succeed).
			s.log.Info("wrote the lock as the successor of a dead holder", append(id, "from", r.from, "after", now.Sub(r.dead))...)
			s.event(r.ip, corev1.EventTypeNormal, "TakenOver", fmt.Sprintf("%s taken over by %s from %s, judged dead", r.ip, s.a.opt.Node, r.from))
		case takeover:
			s.a.opt.Metrics.Failover(now.Sub(r.dead))
			s.log.Info("took over from a dead holder", append(id, "after", now.Sub(r.dead))...)
			s.event(r.ip, corev1.EventTypeNormal, "TakenOver", fmt.Sprintf("%s taken over by %s from %s, judged dead", r.ip, s.a.opt.Node, r.from))
		default:
			s.log.Info("acquired", id...)
		}
		if _, bound := s.binder.bound[r.ip]; !bound {
			s.conflicts.fresh[r.ip] = true
		}
	case lease.Handoff:
		s.a.opt.Metrics.Handoff()
		s.log.Info("handed off", append(id, "to", r.target)...)
		s.event(r.ip, corev1.EventTypeNormal, "Moved", fmt.Sprintf("%s handed from %s to %s", r.ip, s.a.opt.Node, r.target))
	case lease.Release:
		s.log.Info("released", id...)
	}
}

// slowStart is the window of acquisitions in flight at first and after a
// quiet spell (windowAt), and minWindow the narrowest it gets (congestion).
const (
	slowStart = 4
	minWindow = 0.25
)
