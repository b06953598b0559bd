package lease

import (
	"time"
)

// Liveness judges which nodes are alive from heartbeat changes this process
// observed. It is not safe for concurrent use; one goroutine owns it.
//
// The rules, from docs/design.md (Liveness):
//   - a node is alive while a change of its heartbeat was observed within
//     its lease duration, timed on the observer's monotonic clock from the
//     moment of observation (never from the renewTime inside the Lease);
//   - a peer is judged dead only while the observer is connected: the watch
//     that delivers heartbeats must itself be seen delivering. Any heartbeat
//     change, the observer's own included, or any other object on the same
//     watch (Delivered), proves the stream delivered everything written
//     before it, so "fresh" is the time the latest of them was observed. A
//     peer is dead when its lease duration has passed since its last change
//     AND the stream delivered something within the last tail (a renew
//     interval): the whole duration was then watched, up to at most one
//     renew interval ago;
//   - when the stream resumes after a silence longer than the break
//     threshold, every peer is granted a fresh lease duration, so that an
//     API-server restart does not make every node look dead to every other.
type Liveness struct {
	self  string
	tail  time.Duration // the stream must have delivered within this to judge anyone dead
	gap   time.Duration // a stream silence longer than this is a break
	nodes map[string]*observed
	fresh time.Time // when the stream was last seen delivering (a heartbeat change, or Delivered)
	// selfRenew is the renewTime of our own heartbeat as last observed
	// through the stream; it is our own clock, so we may compare it.
	selfRenew time.Time
	lan       lanState // liveness over the LAN, see lan.go
}

type observed struct {
	version  string
	duration time.Duration
	at       time.Time // monotonic: when we saw version appear
	status   Heartbeat
	// presumed: at was granted by a break of the stream, not by a change.
	presumed bool
	// sign is the latest sign of life over the LAN: a datagram of the
	// node, or a peer's report of one. granted is when a break of the LAN
	// (or the node's first heartbeat) granted it a fresh duration.
	sign, granted time.Time
	// vouched is when another node was last seen writing a lock that names
	// this one its holder (Vouched).
	vouched time.Time
}

// NewLiveness returns a tracker for the node named self. Nobody is judged
// dead unless the heartbeat stream delivered within tail; a silence longer
// than breakAfter counts as a lost connection. Callers use the renew
// interval and twice the renew interval: every live node, this one
// included, changes its heartbeat once per renew interval.
func NewLiveness(self string, tail, breakAfter time.Duration) *Liveness {
	return &Liveness{self: self, tail: tail, gap: breakAfter, nodes: map[string]*observed{}}
}

// SetTimings changes tail and break threshold after a configuration edit.
func (l *Liveness) SetTimings(tail, breakAfter time.Duration) {
	l.tail, l.gap = tail, breakAfter
}

// Observe records the current heartbeat of a node as seen at now. Calling it
// again with an unchanged Version changes nothing, so callers may feed it
// every heartbeat on every pass.
func (l *Liveness) Observe(h Heartbeat, now time.Time) {
	o, ok := l.nodes[h.Node]
	if ok && o.version == h.Version {
		o.status = h
		return
	}
	if !ok {
		// Over the LAN too, a node seen for the first time gets a whole
		// lease duration before it can be judged dead.
		o = &observed{granted: now}
		l.nodes[h.Node] = o
	}
	o.version, o.duration, o.at, o.status, o.presumed = h.Version, h.Duration, now, h, false
	l.delivered(now, o)
	if h.Node == l.self {
		l.selfRenew = h.RenewTime
	}
}

// Delivered records that the stream carrying the heartbeats delivered
// another object at now: a lock, which the same watch carries in the same
// order. It proves as much as a heartbeat change does, provided the caller
// observed every heartbeat its cache held when that object arrived. In a
// mass failover the survivors' own renewals queue behind thousands of lock
// changes, and judged by heartbeats alone the stream looked quiet for
// longer than the tail: the dead node's verdict was withdrawn again and
// again, and every takeover waited.
func (l *Liveness) Delivered(now time.Time) {
	l.delivered(now, nil)
}

// delivered moves fresh to now; o, if not nil, is the node whose change
// was just observed.
func (l *Liveness) delivered(now time.Time, o *observed) {
	if !l.fresh.IsZero() && now.Sub(l.fresh) > l.gap {
		// The stream was silent for longer than a break: whatever we saw
		// before says nothing about who stopped renewing meanwhile.
		for _, p := range l.nodes {
			p.at, p.presumed = now, p != o
		}
	}
	l.fresh = now
}

// Known reports whether a heartbeat of node has been observed.
func (l *Liveness) Known(node string) bool {
	_, ok := l.nodes[node]
	return ok
}

// Gone records at now that node's heartbeat Lease has disappeared: deleted
// at a graceful shutdown, by hand, or by garbage collection. A deleted
// heartbeat is not a stopped one (its node writes it again at its next
// renewal), so a peer keeps the rest of its lease duration, as judging it
// dead sooner would let others take IPs it still serves. It counts as not
// eligible meanwhile, so nothing new is handed to it, and is forgotten once
// dead. This node itself is forgotten at once.
func (l *Liveness) Gone(node string, now time.Time) {
	o, ok := l.nodes[node]
	if !ok {
		return
	}
	if node == l.self || !l.Alive(node, now) {
		delete(l.nodes, node)
		return
	}
	o.status.Eligible = false
}

// Alive reports whether node is alive at now. A node never observed is not
// alive. While the stream has not delivered within the tail nobody is
// judged dead.
func (l *Liveness) Alive(node string, now time.Time) bool {
	o, ok := l.nodes[node]
	if !ok {
		return false
	}
	if node == l.self {
		return true
	}
	if !o.vouched.IsZero() && now.Before(o.vouched.Add(l.judgedOver(o, now))) {
		return true
	}
	if l.onLAN(o, now) {
		return now.Sub(lastSign(o)) < l.lan.duration
	}
	if now.Sub(o.at) < o.duration {
		return true
	}
	return now.Sub(l.fresh) > l.tail
}

// judgedOver is the duration o is judged against at now.
func (l *Liveness) judgedOver(o *observed, now time.Time) time.Duration {
	if l.onLAN(o, now) {
		return l.lan.duration
	}
	return o.duration
}

// Vouched records that, at now, this node saw a lock write that names
// node as its holder, made by node itself or by a peer that gave it the
// IP: news of node at most as old as that writer's verdict. It keeps node
// alive, not renewing, for a duration from then. A node whose verdict
// lags (a restarted peer is heard again only once their handshake is
// done) so does not take from node, as successor or in the race, an IP
// a node with fresher news just gave it: it did, and the two bound it at
// once, or raced it back and forth.
func (l *Liveness) Vouched(node string, now time.Time) {
	if o, ok := l.nodes[node]; ok && node != l.self && now.After(o.vouched) {
		o.vouched = now
	}
}

// Renewing reports whether node is seen renewing: a change of its heartbeat
// was observed within its lease duration, and not merely granted by a break
// of the stream. Alive is weaker: it also holds while the stream is too
// quiet to judge anyone dead, and for a fresh duration after a break. A
// node that is alive keeps its IPs; only a renewing one is given new ones,
// so that nothing is handed to a node that may have died unseen.
func (l *Liveness) Renewing(node string, now time.Time) bool {
	o, ok := l.nodes[node]
	if !ok {
		return false
	}
	if node == l.self {
		return true
	}
	if l.onLAN(o, now) {
		return now.Sub(seen(o)) < l.lan.duration
	}
	return !o.presumed && now.Sub(o.at) < o.duration
}

// NextExpiry returns the earliest time after now at which a verdict on an
// observed node changes if nothing else does: the end of its duration, when
// it stops being seen renewing and may be judged dead. The owner sets a
// timer for it.
func (l *Liveness) NextExpiry(now time.Time) (time.Time, bool) {
	var next time.Time
	consider := func(at time.Time) {
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	for n, o := range l.nodes {
		if n == l.self {
			continue
		}
		consider(o.at.Add(o.duration))
		if !o.vouched.IsZero() {
			consider(o.vouched.Add(l.judgedOver(o, now)))
		}
		if l.lan.duration > 0 && o.status.LivenessPort != 0 {
			consider(seen(o).Add(l.lan.duration))
			consider(lastSign(o).Add(l.lan.duration))
		}
	}
	if l.lan.duration > 0 && !l.lan.fresh.IsZero() {
		// Verdicts fall back to the heartbeats when the LAN goes quiet.
		consider(l.lan.fresh.Add(l.lan.tail))
	}
	return next, !next.IsZero()
}

// DeadSince returns when node was judged dead: the end of its last observed
// lease duration. ok is false while it is alive or was never
// observed.
func (l *Liveness) DeadSince(node string, now time.Time) (time.Time, bool) {
	o, ok := l.nodes[node]
	if !ok || l.Alive(node, now) {
		return time.Time{}, false
	}
	dead := o.at.Add(o.duration)
	if l.onLAN(o, now) {
		dead = lastSign(o).Add(l.lan.duration)
	}
	if !o.vouched.IsZero() {
		dead = latest(dead, o.vouched.Add(l.judgedOver(o, now)))
	}
	return dead, true
}

// Connected reports whether the heartbeat stream delivered a change within
// the break threshold.
func (l *Liveness) Connected(now time.Time) bool {
	return !l.fresh.IsZero() && now.Sub(l.fresh) <= l.gap
}

// SelfSeenSince reports whether our own heartbeat, renewed at or after t on
// our own clock, has come back through the stream: everything written before
// that renewal is then in our cache. Used as a barrier after the API server
// or the link returns, before binding again.
func (l *Liveness) SelfSeenSince(t time.Time) bool {
	return !l.selfRenew.IsZero() && !l.selfRenew.Before(t)
}

// Heartbeat returns the last observed heartbeat of node.
func (l *Liveness) Heartbeat(node string) (Heartbeat, bool) {
	o, ok := l.nodes[node]
	if !ok {
		return Heartbeat{}, false
	}
	return o.status, true
}

// Nodes returns every node with an observed heartbeat.
func (l *Liveness) Nodes() []string {
	out := make([]string, 0, len(l.nodes))
	for n := range l.nodes {
		out = append(out, n)
	}
	return out
}
