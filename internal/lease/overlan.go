package lease

import "time"

// Liveness over the LAN (docs/design.md): every eipd sends each peer, once
// per renew interval, a datagram that says it is alive and how long ago it
// last had a sign of life of every other node (heard directly, or reported
// by a third node). Heartbeat Leases are then renewed slowly and stay the
// fallback. The rules, on top of those of Liveness:
//   - a peer whose heartbeat names a liveness port is judged over the LAN
//     while the LAN is connected: a datagram of some peer arrived within
//     the LAN tail. It is alive while its latest sign, over the LAN or a
//     change of its heartbeat, is younger than the lease duration, and seen
//     renewing while a sign that was not presumed is;
//   - a peer's report counts as a sign: a node that one peer cannot hear
//     (a one-way loss, a firewall between two nodes) is not judged dead
//     while another peer hears it;
//   - when the LAN comes back after a silence longer than the LAN gap, every
//     node is granted a fresh lease duration, as after a break of the watch;
//   - while the LAN is not connected (this node hears nobody), verdicts come
//     from the heartbeats alone, as without liveness over the LAN.

// lanState is what this node heard over the LAN.
type lanState struct {
	duration  time.Duration // a peer's signs are judged against this; 0: off
	tail, gap time.Duration
	suspect   time.Duration // see SuspectAfter
	fresh     time.Time     // when the latest datagram arrived
	started   time.Time     // when this node first sent a datagram; zero: not yet
	peers     map[string]*peerReport
}

// peerReport is what a peer's latest datagram told us.
type peerReport struct {
	at time.Time // when it arrived
	// ofSelf is the peer's latest sign of this node (zero: it had none);
	// others is whether it had a fresh sign of another node, that is,
	// whether it can judge us dead without hearing us.
	ofSelf time.Time
	others bool
	// first is when we began hearing this peer (again, after a silence
	// longer than the LAN tail). A peer that has not had a sign of us yet
	// has just started, or just learned of us, and judges us only a lease
	// duration after that: its reports count from then.
	first time.Time
	// staleSince is when the run of reports of an ofSelf at least suspect
	// old, that this one belongs to, began (zero: this one is fresh). A
	// run is broken by a fresh report, or by a silence of the peer longer
	// than the LAN tail: a peer that sends to us only in turn says nothing
	// in between.
	staleSince time.Time
}

// SetLAN turns liveness over the LAN on (duration > 0: the lease duration)
// or off. A peer is judged over the LAN only while a datagram of some peer
// arrived within tail (two renew intervals); a silence longer than gap is a
// break. suspect is SuspectAfter.
func (l *Liveness) SetLAN(duration, tail, gap, suspect time.Duration) {
	if duration == 0 {
		l.lan.started = time.Time{}
	}
	l.lan.duration, l.lan.tail, l.lan.gap, l.lan.suspect = duration, tail, gap, suspect
	if duration == 0 {
		l.lan.fresh, l.lan.peers = time.Time{}, nil
	}
}

// Sending records when this node sent its first datagram since liveness
// over the LAN was turned on; later calls change nothing. Until then this
// node is never unheard, and a peer that never heard it counts from then
// (or from when we began hearing that peer, if that is later): a node
// whose first pass is long (thousands of IPs at a cold start) opens its
// port well before it first speaks.
func (l *Liveness) Sending(t time.Time) {
	if l.lan.duration > 0 && l.lan.started.IsZero() {
		l.lan.started = t
	}
}

// Datagram records a datagram from node that arrived at now, with the ages
// of the signs of life it had of other nodes when it sent it. A node whose
// heartbeat has not been observed is ignored. It reports whether a node may
// have started to be seen renewing, which the caller answers with a pass;
// verdicts that expire are found by NextExpiry.
func (l *Liveness) Datagram(node string, ages map[string]time.Duration, now time.Time) bool {
	o, ok := l.nodes[node]
	if l.lan.duration == 0 || !ok || node == l.self {
		return false
	}
	if l.lan.fresh.IsZero() || now.Sub(l.lan.fresh) > l.lan.gap {
		// The LAN was silent: whatever we heard before says nothing about
		// who stopped meanwhile.
		for _, p := range l.nodes {
			p.granted = now
		}
	}
	l.lan.fresh = latest(l.lan.fresh, now)
	if l.lan.peers == nil {
		l.lan.peers = map[string]*peerReport{}
	}
	prev := l.lan.peers[node]
	rep := &peerReport{at: now, first: now}
	if prev != nil && now.Sub(prev.at) <= l.lan.tail {
		rep.first = prev.first
	}
	l.lan.peers[node] = rep
	changed := l.sign(o, now, now)
	if age, ok := ages[l.self]; !ok || age >= l.lan.suspect {
		rep.staleSince = now
		if prev != nil && !prev.staleSince.IsZero() && now.Sub(prev.at) <= l.lan.tail {
			rep.staleSince = prev.staleSince
		}
	}
	for n, age := range ages {
		if n == l.self {
			rep.ofSelf = now.Add(-age)
			continue
		}
		if n != node && age < l.lan.tail {
			rep.others = true
		}
		if p, ok := l.nodes[n]; ok && n != node {
			changed = l.sign(p, now.Add(-age), now) || changed
		}
	}
	return changed
}

// sign records a sign of life of o at t and reports whether o was not seen
// renewing over the LAN before it.
func (l *Liveness) sign(o *observed, t, now time.Time) bool {
	if t.After(now) || !t.After(o.sign) {
		return false
	}
	was := now.Sub(seen(o)) < l.lan.duration
	o.sign = t
	return !was && now.Sub(t) < l.lan.duration
}

// LANConnected reports whether a datagram of some peer arrived within the
// LAN tail: peers are judged over the LAN.
func (l *Liveness) LANConnected(now time.Time) bool {
	return l.lan.duration > 0 && !l.lan.fresh.IsZero() && now.Sub(l.lan.fresh) <= l.lan.tail
}

// LANPeers counts the peers seen renewing over the LAN at now.
func (l *Liveness) LANPeers(now time.Time) int {
	if !l.LANConnected(now) {
		return 0
	}
	n := 0
	for name, o := range l.nodes {
		if name != l.self && o.status.LivenessPort != 0 && now.Sub(seen(o)) < l.lan.duration {
			n++
		}
	}
	return n
}

// SuspectAfter is how old a node lets its latest sign of a peer grow
// before it asks that peer directly (docs/design.md, Liveness over the
// LAN): a node sends its datagram to a few peers each renew interval, and
// signs of the others reach it through their reports, a hop or two late.
// A peer whose sign is this old gets a datagram at once, and answers it
// at once. Half the lease duration leaves the other half before a
// verdict; and it is at least a renew interval before fence-after, so
// that the answer, and the asker's answer to it, reach a node that is
// heard before its fence-after deadline (Unheard) comes.
func SuspectAfter(duration, fenceAfter, renew time.Duration) time.Duration {
	return max(min(duration/2, fenceAfter-renew), renew/2)
}

// Unheard reports whether some peer may judge this node dead soon: a peer
// that we still hear (its datagram arrived within the LAN tail), that hears
// another node, and whose latest sign of us is at least fenceAfter old (a
// peer that has none counts from when we began hearing it: one that joins
// hears the others before it hears us, and says nothing yet). Such
// a node must unbind before that peer takes its IPs over. Otherwise next is
// when that would first be true if nothing changes (zero when never).
// A peer we no longer hear is not counted: it may be dead, and a node
// cut off from one peer is still reported alive to it by the others.
//
// Only a report that confirms a stale one counts. A peer that sends to a
// few peers a renew interval learns of us mostly through others, and does
// not tell us when it does: a report of a sign younger than suspect says
// nothing of what that peer knows later. A peer whose sign of us grows
// suspect old asks us at once, and again every renew interval while it
// stays that old; we answer each question at once (see SuspectAfter). So
// a second such report, half a renew interval or more after the first,
// says that our answer did not reach it; one alone may have crossed our
// answer, or come from a peer that asked late because its loop ran late.
func (l *Liveness) Unheard(now time.Time, fenceAfter time.Duration) (unheard bool, next time.Time) {
	if l.lan.duration == 0 || l.lan.started.IsZero() {
		return false, time.Time{}
	}
	for _, p := range l.lan.peers {
		// The tail is two renew intervals.
		if !p.others || now.Sub(p.at) > l.lan.tail || p.staleSince.IsZero() || p.at.Sub(p.staleSince) < l.lan.tail/4 {
			continue
		}
		since := p.ofSelf
		if since.IsZero() {
			since = p.first
		}
		deadline := latest(since, l.lan.started).Add(fenceAfter)
		if !now.Before(deadline) {
			return true, time.Time{}
		}
		if exp := p.at.Add(l.lan.tail); deadline.Before(exp) && (next.IsZero() || deadline.Before(next)) {
			next = deadline
		}
	}
	return false, next
}

// onLAN: o is judged over the LAN at now.
func (l *Liveness) onLAN(o *observed, now time.Time) bool {
	return o.status.LivenessPort != 0 && l.LANConnected(now)
}

// seen is the latest sign of life of o that was not presumed: a datagram,
// a report or a change of its heartbeat.
func seen(o *observed) time.Time {
	if o.presumed {
		return o.sign
	}
	return latest(o.sign, o.at)
}

// lastSign is what keeps o alive over the LAN: its latest sign of life, or
// a fresh duration granted since by a break of the LAN. A break of the
// watch grants nothing here: the LAN watched meanwhile.
func lastSign(o *observed) time.Time {
	return latest(o.granted, seen(o))
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
