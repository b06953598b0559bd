package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/internal/lease"
)

// writeQueue is the lock writes in flight and the room for more: the
// window of acquisitions and the bound on IPs dark for a hand-off.
type writeQueue struct {
	jobs     chan write
	results  chan writeResult
	inflight map[string]bool
	pending  map[string]string // lock name -> the holder an ownership write in flight names
	// waiting are the acquisitions decided while they could not be sent.
	waiting   waitQueue
	acquiring int // Create and Acquire writes in flight, see dispatch
	dropping  int // writes in flight whose IP was unbound first, see drop
	// window is how many acquisitions may be in flight (congestion);
	// below one, one at a time, none before paceUntil. idleSince is when
	// the last acquisition in flight came back, or the last pause ended
	// (windowAt). sent numbers the acquisitions sent, and cut is the first
	// sent after the window was last narrowed.
	window               float64
	paceUntil, idleSince time.Time
	sent, cut            int
	// dropWaiting are the bound IPs whose hand-off or delete waits for
	// one of those (drop).
	dropWaiting map[netip.Addr]bool
	undropped   []netip.Addr // returned by done, its room kept
	writers     int          // Options.Writers

	// Where what comes back is reported.
	metrics Metrics
	log     *slog.Logger
	events  *eventPoster
	node    string
}

// sendOutcome is what became of a write handed to send.
type sendOutcome int

const (
	sent       sendOutcome = iota
	windowShut             // an acquisition, and the window is full: decided again when one completes
	queueFull              // the writers' queue has no room
)

// send queues w for the writers, if the window lets it go (full), and
// counts it in flight. timeout is a lock write's (lockWriteTimeout).
func (q *writeQueue) send(w write, now time.Time, timeout time.Duration) sendOutcome {
	acquisition := w.action.Acquires()
	if acquisition && q.full(now, timeout) {
		return windowShut
	}
	w.round = q.sent
	select {
	case q.jobs <- w:
	default:
		return queueFull
	}
	q.inflight[w.name] = true
	if acquisition {
		q.window = q.windowAt(now, timeout)
		q.acquiring++
		q.sent++
	}
	if w.drops {
		q.dropping++
	}
	switch w.action {
	case lease.Create, lease.Acquire, lease.Succeed, lease.Handoff, lease.Release:
		q.pending[w.name] = w.target
	}
	return sent
}

// full: no acquisition may be sent now (congestion).
func (q *writeQueue) full(now time.Time, timeout time.Duration) bool {
	w := q.windowAt(now, timeout)
	if w < 1 {
		return q.acquiring > 0 || now.Before(q.paceUntil)
	}
	return q.acquiring >= min(int(w), q.writers)
}

// windowAt is the window of acquisitions in flight at now: slowStart
// after a quiet spell, a lock write's timeout with none in flight and no
// pause, since what the API server answered before says little of what it
// answers now (design-notes.md, "The window of acquisitions").
func (q *writeQueue) windowAt(now time.Time, timeout time.Duration) float64 {
	if q.acquiring == 0 && !now.Before(q.paceUntil) && now.Sub(later(q.idleSince, q.paceUntil)) >= timeout {
		return slowStart
	}
	return q.window
}

// endPause ends a pause between acquisitions that is over at now: a quiet
// spell (windowAt) counts from its end.
func (q *writeQueue) endPause(now time.Time) {
	if !now.Before(q.paceUntil) {
		q.idleSince = later(q.idleSince, q.paceUntil)
		q.paceUntil = time.Time{}
	}
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
func (q *writeQueue) congestion(r writeResult, now time.Time, timeout time.Duration) {
	writers := float64(q.writers)
	if r.err != nil && !rewritten(r.err) {
		if r.round < q.cut {
			return
		}
		q.cut = q.sent
		q.window = max(minWindow, min(q.window, writers)/2)
		if q.window < 1 {
			q.paceUntil = now.Add(time.Duration(float64(timeout) * (1/q.window - 1)))
		}
		return
	}
	q.window = min(writers, q.window+min(q.window, 1))
	q.paceUntil = time.Time{}
}

// mayDrop says whether the write of bound ip may unbind it now: fewer
// such writes are in flight than there are writers. If not, ip waits for
// one of them to come back (done).
func (q *writeQueue) mayDrop(ip netip.Addr) bool {
	if q.dropping >= q.writers {
		q.dropWaiting[ip] = true
		return false
	}
	delete(q.dropWaiting, ip)
	return true
}

// done takes a write's result out of flight. It returns the IPs whose
// drop waited for it (mayDrop), to be decided again; the slice is reused
// by the next call.
func (q *writeQueue) done(r writeResult, now time.Time, timeout time.Duration) (undropped []netip.Addr) {
	delete(q.inflight, r.name)
	if r.action.Acquires() {
		q.acquiring--
		if q.acquiring == 0 {
			q.idleSince = now
		}
		q.congestion(r, now, timeout)
	}
	q.undropped = q.undropped[:0]
	if r.drops {
		q.dropping--
		for ip := range q.dropWaiting {
			q.undropped = append(q.undropped, ip)
		}
		clear(q.dropWaiting)
	}
	delete(q.pending, r.name)
	return q.undropped
}

// wait queues the acquisition of ip until the window has room, and
// others that go first went (first says whether it is one of those).
func (q *writeQueue) wait(ip netip.Addr, first bool) { q.waiting.add(ip, first) }

// waitsForRoom queues the acquisition of ip while the window is full, or
// while others that go first wait and it does not (first): it is decided
// again when one in flight completes, those the policy gives this node or
// that it ranks first for before the others. One whose rank's turn came
// waits too while any of those does, or it would take the writer they
// wait for, racing another node for its share (a Lease conflict).
func (q *writeQueue) waitsForRoom(ip netip.Addr, first bool, now time.Time, timeout time.Duration) bool {
	if q.full(now, timeout) || !first && q.waiting.firstWaiting() > 0 {
		q.wait(ip, first)
		return true
	}
	return false
}

// unwait takes ip out of the waiting acquisitions: it is being decided.
func (q *writeQueue) unwait(ip netip.Addr) { q.waiting.remove(ip) }

// admitWaiting decides again the waiting acquisitions, those that go first
// first, in the order they were decided, while the window has room.
func (q *writeQueue) admitWaiting(now time.Time, timeout time.Duration, decide func(netip.Addr)) {
	for _, first := range []bool{true, false} {
		end := q.waiting.start()
		for i := 0; !q.full(now, timeout); {
			ip, after, ok := q.waiting.next(i, end, first)
			if !ok {
				break
			}
			decide(ip)
			i = after
		}
	}
}

// abandon stops waiting for the writes in flight (a stop that waited
// long enough for them).
func (q *writeQueue) abandon() { q.inflight = map[string]bool{} }

// newPass empties what a full pass decides again: the acquisitions
// waiting for room and the drops waiting for a writer.
func (q *writeQueue) newPass() {
	// Emptied by a new map, not cleared: see shrink.
	q.dropWaiting = map[netip.Addr]bool{}
	q.waiting.reset()
}

// report logs, counts and posts what a lock write came to.
func (q *writeQueue) report(r writeResult, now time.Time) {
	// The write's identity in each line, not a logger of its own
	// (log.With), which cost kilobytes a write in a mass failover.
	id := []any{"ip", r.ip, "lease", r.name}
	if r.err != nil {
		if rewritten(r.err) {
			q.metrics.Conflict()
			q.log.Debug("lock write lost a race", append(id, "action", r.action, "err", r.err)...)
			return
		}
		q.metrics.APIError(r.action.String())
		q.log.Warn("lock write failed", append(id, "action", r.action, "err", r.err)...)
		return
	}
	switch r.action {
	case lease.Delete:
		q.log.Info("deleted lock", id...)
	case lease.Create, lease.Acquire, lease.Succeed:
		takeover := !r.dead.IsZero()
		q.metrics.Acquired(takeover)
		switch {
		case r.action == lease.Succeed:
			// Its failover was counted when it was bound (successions.bound).
			q.log.Info("wrote the lock as the successor of a dead holder", append(id, "from", r.from, "after", now.Sub(r.dead))...)
			q.events.onIP(r.ip, corev1.EventTypeNormal, "TakenOver", fmt.Sprintf("%s taken over by %s from %s, judged dead", r.ip, q.node, r.from))
		case takeover:
			q.metrics.Failover(now.Sub(r.dead))
			q.log.Info("took over from a dead holder", append(id, "after", now.Sub(r.dead))...)
			q.events.onIP(r.ip, corev1.EventTypeNormal, "TakenOver", fmt.Sprintf("%s taken over by %s from %s, judged dead", r.ip, q.node, r.from))
		default:
			q.log.Info("acquired", id...)
		}
	case lease.Handoff:
		q.metrics.Handoff()
		q.log.Info("handed off", append(id, "to", r.target)...)
		q.events.onIP(r.ip, corev1.EventTypeNormal, "Moved", fmt.Sprintf("%s handed from %s to %s", r.ip, q.node, r.target))
	case lease.Release:
		q.log.Info("released", id...)
	}
}

// slowStart is the window of acquisitions in flight at first and after a
// quiet spell (windowAt), and minWindow the narrowest it gets (congestion).
const (
	slowStart = 4
	minWindow = 0.25
)
