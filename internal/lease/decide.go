package lease

import (
	"net/netip"
	"slices"
	"time"
)

// Action is what a node does about one IP.
type Action int

const (
	// None: nothing to do now (perhaps later: see Decision.At).
	None Action = iota
	// Bind the IP: this node holds the lock and has not bound it.
	Bind
	// Unbind the IP: this node has it bound but does not hold the lock.
	Unbind
	// Create the lock naming this node (the IP has no lock yet).
	Create
	// Acquire an existing lock whose holder is free or dead.
	Acquire
	// Handoff: unbind, then write the lock naming Decision.Target.
	Handoff
	// Release: unbind, then write the lock with no holder.
	Release
	// Delete: unbind, then delete the lock of an IP no Service names.
	Delete
	// ClearMove withdraws a move request that cannot be carried out.
	ClearMove
	// Succeed: the lock names this node to succeed its holder, judged
	// dead: bind the IP (probing first) without waiting for a write, and
	// write the lock naming this node.
	Succeed
	// NameSuccessor rewrites the successor of a lock this node holds
	// (Decision.Successor), whose named one is gone.
	NameSuccessor
	// RecordOwner writes into a lock this node holds the Service that owns
	// its IP, which the lock does not record (IP.Unrecorded).
	RecordOwner
)

var actionNames = [...]string{"none", "bind", "unbind", "create", "acquire", "handoff", "release", "delete", "clear-move", "succeed", "name-successor", "record-owner"}

func (a Action) String() string { return actionNames[a] }

// Acquires: the action writes the lock naming this node as its holder.
func (a Action) Acquires() bool { return a == Create || a == Acquire || a == Succeed }

// View is one node's view of the cluster at one moment, as the decisions
// need it.
type View struct {
	Self string
	Now  time.Time
	// Writable: this node may write locks (its API connection works and its
	// cache has caught up with its own latest heartbeat).
	Writable bool
	// Eligible: this node may hold IPs (eligible Node, good configuration,
	// interface present, not shutting down).
	Eligible bool
	// Live lists the eligible nodes seen renewing (Liveness.Renewing), this
	// one too when eligible: the nodes IPs may be given to.
	Live []string
	// Alive judges any node; DeadSince says since when a dead node is dead.
	// Renewing says whether a node is seen renewing: alive by signs of
	// life, not merely presumed alive after a break of what this node
	// watches (nil: as Alive).
	Alive     func(node string) bool
	DeadSince func(node string) (time.Time, bool)
	Renewing  func(node string) bool
	// Step is the wait per rank before acquiring, which lets the best-ranked
	// node win without a conflict and spreads a dead node's IPs.
	Step time.Duration
	// LateStep is the wait per rank beyond the first Racers: a write's
	// timeout, so that a later rank races only once those before it had
	// time to act and did not.
	LateStep time.Duration
	// PeersKnown is when this node will have watched heartbeats for a
	// renew interval since it (re)connected. Before then it may not know
	// every live peer, nor its rank among them: it races for no IP, and
	// ranks count from then at the earliest.
	PeersKnown time.Time
	// LiveUntil says when this node last counted a node among Live (false
	// when it never did, since it started). A holder rewrites a lock's
	// successor only once it has not been live for SuccessorGrace: a node
	// restarting, or flapping, costs no write per IP.
	LiveUntil      func(node string) (time.Time, bool)
	SuccessorGrace time.Duration
	// Gone says whether a node is out of service, and since when this node
	// saw it so: its Node object was deleted, or tainted
	// node.kubernetes.io/out-of-service (kubelet's non-graceful shutdown).
	// A gone node keeps no IP, whatever its heartbeat says: its locks are
	// free at once (Keeps, LostSince), and a gone node unbinds what it
	// holds without writing (decideGone). nil: no node is gone.
	Gone func(node string) (since time.Time, gone bool)
	// WireRepair is how long an IP whose successor hears no answer from
	// this node stays after this node announced it again (IP.Unheard):
	// the successor checks it again meanwhile, several times.
	WireRepair time.Duration
	// SuccessorWait is how long after a holder was judged dead the other
	// nodes leave its IPs to the successor its lock names: a lease
	// duration plus the probe window, time enough for a live successor to
	// probe, bind and write. A successor that has neither bound nor
	// written by then is raced (still ranked first): one that is live but
	// cannot bind (its interface is missing, it is compromised) would
	// otherwise keep the IP dark for as long as it stays live.
	SuccessorWait time.Duration

	// first, when set, is a node of Live ranked first in a race whatever
	// its score.
	first string
}

// IP is what this node knows of one address.
type IP struct {
	Addr  netip.Addr
	Lock  *Lock // nil when no lock exists
	Named bool  // some Service names it and it lies in a range
	Bound bool  // bound on this node
	// FreeSince is when this node first saw the IP without a holder it
	// knows (no lock, an empty holder, or a holder never seen alive); zero
	// otherwise.
	FreeSince time.Time
	// Planned is where the policy wants the IP: for a held IP the node its
	// holder hands it to, for an unheld IP the node that should take it
	// first. Empty when the policy has no opinion.
	Planned string
	// Next is where the policy puts the IP once this node, holding it, is
	// gone: the successor its lock names when it is a live node other than
	// the holder. Empty: the best-ranked such node.
	Next string
	// Only restricts which nodes may hold the IP (externalTrafficPolicy:
	// Local): the others never race for it, and a holder it leaves out
	// hands it to a live node it names, or releases it.
	Only Only
	// Unheard is when this node, holding the IP, announced it again
	// because the node checking the wire for it (its lock's successor)
	// heard no answer from it; zero while that node hears it, or reports
	// nothing it may act on. Once View.WireRepair has passed since
	// without the verdict changing, the IP goes to the successor
	// (docs/design.md, Checking the wire).
	Unheard time.Time
	// Unrecorded: the IP's lock does not record the Service that owns it
	// (Lock.Owner): none yet, or one that no longer names the IP. Its
	// holder writes it, as every write of a lock records it.
	Unrecorded bool
}

// Only restricts the nodes an IP may live on, when Restricted, to Nodes.
type Only struct {
	Restricted bool
	Nodes      []string // sorted
}

// Allows reports whether node may hold the IP.
func (o Only) Allows(node string) bool {
	if !o.Restricted {
		return true
	}
	_, ok := slices.BinarySearch(o.Nodes, node)
	return ok
}

// Of returns the nodes of live it allows, in their order: live itself
// when it restricts nothing.
func (o Only) Of(live []string) []string {
	if !o.Restricted {
		return live
	}
	out := make([]string, 0, min(len(live), len(o.Nodes)))
	for _, n := range live {
		if o.Allows(n) {
			out = append(out, n)
		}
	}
	return out
}

// Decision is the outcome for one IP. When Action is None and At is set,
// the decision may change at At even if nothing else does.
type Decision struct {
	Action Action
	Target string
	// Successor is the node the lock names to succeed its new holder when
	// the action writes a holder (Create, Acquire, Succeed, Handoff), or
	// the one NameSuccessor writes, or one a Bind writes too; "" for none.
	Successor string
	At        time.Time
	Reason    string
	// ReadWritable: the decision would be another (another action, target
	// or time) were View.Writable the other way, so it must be taken again
	// when that changes. One without it stands whatever becomes of it.
	ReadWritable bool
}

// Decide is the per-IP rule book of docs/design.md (Binding and hand-off
// rules). It never
// binds what the lock does not give this node, and every action that gives
// the IP away (Handoff, Release, Delete) is carried out by unbinding first.
func Decide(v View, ip IP) Decision {
	d := v.decide(ip)
	if (d.Action.Acquires() || d.Action == NameSuccessor) && v.Now.Before(v.PeersKnown) {
		// Peers started at the same moment show their first heartbeats
		// within a renew interval; racing before that, every node of a
		// cluster starting cold ranks itself first for every IP.
		return Decision{At: v.PeersKnown, Reason: "learning the live nodes before racing", ReadWritable: d.ReadWritable}
	}
	return d
}

func (v View) decide(ip IP) Decision {
	if ip.Named && ip.Only.Restricted {
		// Whom the IP may go to is whom it may be given to: the live
		// nodes it allows. A plan naming another is ignored.
		v.Live = ip.Only.Of(v.Live)
		if !ip.Only.Allows(ip.Planned) {
			ip.Planned = ""
		}
	}
	if ip.FreeSince.Before(v.PeersKnown) && !ip.FreeSince.IsZero() {
		// Ranks count from when this node knew its peers, not from when
		// it first saw the IP free, which may be before.
		ip.FreeSince = v.PeersKnown
	}
	if !ip.Named {
		return decideOrphan(v, ip)
	}
	lk := ip.Lock
	switch {
	case lk == nil:
		d := v.race(ip, ip.FreeSince, Create, "no lock yet")
		if ip.Bound && d.Action == None {
			// Unbound either way, unless a writable node would create.
			other := v
			other.Writable = true
			return Decision{Action: Unbind, Reason: "bound without a lock",
				ReadWritable: !v.Writable && other.raceRule(ip, ip.FreeSince, Create, "").Action != None}
		}
		return d
	case lk.Holder == v.Self:
		return v.decideHeld(ip)
	}
	if d, ok := v.succession(ip); ok {
		return d
	}
	switch {
	case ip.Bound:
		return Decision{Action: Unbind, Reason: "lock names " + holderText(lk.Holder)}
	case lk.Holder == "":
		return v.race(ip, ip.FreeSince, Acquire, "free")
	case v.Keeps(lk.Holder):
		return Decision{Reason: "held by a live node"}
	default:
		since, ok := v.LostSince(lk.Holder)
		if !ok {
			// A holder never seen alive (a lock edited by hand, a node
			// gone before we started): count from when we first saw the
			// IP without a live holder, so ranks still apply.
			since = ip.FreeSince
		}
		return v.race(ip, since, Acquire, "holder "+v.lostWhy(lk.Holder))
	}
}

func holderText(h string) string {
	if h == "" {
		return "no holder"
	}
	return h
}

// race decides whether this node tries to take an unheld IP now: a pending
// move to this node, or the policy's choice of this node, goes at once;
// otherwise the node waits its rank times the step, counted from since
// (one step more when the policy chose another live node, which then wins
// without a conflict unless it fails to act).
func (v View) race(ip IP, since time.Time, act Action, why string) Decision {
	d := v.raceRule(ip, since, act, why)
	// An eligible node that may write acts or waits for a time; one that
	// may not does neither. An ineligible one does neither either way.
	d.ReadWritable = v.Eligible
	return d
}

func (v View) raceRule(ip IP, since time.Time, act Action, why string) Decision {
	if !v.Writable || !v.Eligible {
		return Decision{Reason: why + "; this node cannot take it now"}
	}
	if !ip.Only.Allows(v.Self) {
		return Decision{Reason: why + "; no ready endpoint of its Service here"}
	}
	if ip.Lock != nil && ip.Lock.MoveTo == v.Self {
		return Decision{Action: act, Successor: v.successorFor(ip, v.Self), Reason: why + "; moved here"}
	}
	if ip.Planned == v.Self {
		return Decision{Action: act, Successor: v.successorFor(ip, v.Self), Reason: why + "; chosen by policy"}
	}
	rank := Rank(ip.Addr, v.Self, v.Live)
	if v.first != "" {
		rank = 1 + Rank(ip.Addr, v.Self, slices.DeleteFunc(slices.Clone(v.Live), func(n string) bool { return n == v.first }))
	}
	if ip.Planned != "" && v.isLive(ip.Planned) {
		rank++
	}
	at := since.Add(v.rankWait(rank))
	if at.After(v.Now) {
		return Decision{At: at, Reason: why + "; waiting for rank"}
	}
	return Decision{Action: act, Successor: v.successorFor(ip, v.Self), Reason: why}
}

// Racers is how many ranks race for an IP a Step apart. Each later rank
// waits a LateStep more: at fifty nodes, with every survivor racing a Step
// after the one before, a median of 21 survivors raced for each of a dead
// node's IPs, and their timed-out writes kept the API server from
// answering anyone's for ten seconds.
const Racers = 3

// rankWait is how long after an IP became free this node's rank lets it
// race for it.
func (v View) rankWait(rank int) time.Duration {
	if rank < Racers {
		return time.Duration(rank) * v.Step
	}
	return (Racers-1)*v.Step + time.Duration(rank-Racers+1)*v.LateStep
}

func (v View) decideHeld(ip IP) Decision {
	if _, gone := v.gone(v.Self); gone {
		return v.decideGone(ip)
	}
	w, writes := v.heldWrite(ip)
	if writes && v.Writable {
		w.ReadWritable = true
		return w
	}
	n, at, rewrite := v.successorWrite(ip)
	if rewrite {
		if !v.Writable {
			n = ""
		}
		writes = true
	}
	switch {
	case ip.Bound && n != "":
		why := "it names no successor"
		if c := ip.Lock.Successor; c != "" {
			why = "its successor " + c + " is gone"
		}
		return Decision{Action: NameSuccessor, Successor: n, Reason: why, ReadWritable: true}
	case ip.Bound && ip.Unrecorded && v.Writable:
		return Decision{Action: RecordOwner, Reason: "its lock does not record the Service that owns it", ReadWritable: true}
	case ip.Bound && !ip.Unheard.IsZero() && ip.Unheard.Add(v.WireRepair).After(v.Now):
		return Decision{At: earliest(at, ip.Unheard.Add(v.WireRepair)), Reason: "held and bound; announced again as its successor hears no answer", ReadWritable: true}
	case ip.Bound:
		return Decision{At: at, Reason: "held and bound", ReadWritable: writes || ip.Unrecorded}
	case !ip.Only.Allows(v.Self):
		return Decision{Reason: "held, but no ready endpoint of its Service here", ReadWritable: writes}
	}
	// A successor to name (Successor) is written along with the bind,
	// which does not wait for it.
	return Decision{Action: Bind, Successor: n, At: at, Reason: "held", ReadWritable: writes}
}

// heldWrite is the lock write this node makes about an IP it holds when it
// may write: a requested move carried out or withdrawn, a hand-off (or a
// release) because no endpoint of an eTP=Local Service is here, a
// hand-off because it is not eligible, or one the policy asks for.
func (v View) heldWrite(ip IP) (Decision, bool) {
	if mt := ip.Lock.MoveTo; mt != "" {
		switch {
		case mt == v.Self:
			return Decision{Action: ClearMove, Reason: "already here"}, true
		case v.isLive(mt):
			return Decision{Action: Handoff, Target: mt, Successor: v.successorFor(ip, mt), Reason: "move requested"}, true
		default:
			return Decision{Action: ClearMove, Reason: "move target " + mt + " is not a live eligible node"}, true
		}
	}
	if !ip.Only.Allows(v.Self) {
		// kube-proxy drops the IP's traffic here: it goes to a node that
		// delivers it, or nowhere.
		if t := v.handoffTarget(ip); t != "" {
			return Decision{Action: Handoff, Target: t, Successor: v.successorFor(ip, t), Reason: "no ready endpoint of its Service here"}, true
		}
		return Decision{Action: Release, Reason: "no live node has a ready endpoint of its Service"}, true
	}
	if !v.Eligible {
		if t := v.handoffTarget(ip); t != "" {
			return Decision{Action: Handoff, Target: t, Successor: v.successorFor(ip, t), Reason: "this node is not eligible"}, true
		}
	} else if s, ok := v.unheardBy(ip); ok {
		return Decision{Action: Handoff, Target: s, Successor: v.successorFor(ip, s), Reason: "its successor " + s + " hears no answer for it from this node"}, true
	} else if ip.Planned != "" && ip.Planned != v.Self && v.isLive(ip.Planned) {
		return Decision{Action: Handoff, Target: ip.Planned, Successor: v.successorFor(ip, ip.Planned), Reason: "policy"}, true
	}
	return Decision{}, false
}

// unheardBy says whether ip, held here, goes to its successor because that
// node still hears no answer from this one a WireRepair after this node
// announced it again, and names it. The successor is the node that heard
// nothing, whose own answers it would hear, and the one the IP goes to
// if this node dies: it must be a live node the IP may go to.
func (v View) unheardBy(ip IP) (string, bool) {
	s := ip.Lock.Successor
	if ip.Unheard.IsZero() || !ip.Bound || v.Now.Before(ip.Unheard.Add(v.WireRepair)) ||
		s == "" || s == v.Self || !v.isLive(s) || !ip.Only.Allows(s) {
		return "", false
	}
	return s, true
}

// handoffTarget is the node this one gives ip to when it may not keep it:
// the policy's choice if live, else the best-ranked live peer; "" if none.
func (v View) handoffTarget(ip IP) string {
	if t := ip.Planned; t != v.Self && v.isLive(t) {
		return t
	}
	return v.best(ip.Addr, v.Self)
}

func decideOrphan(v View, ip IP) Decision {
	d := orphanRule(v, ip)
	if lk := ip.Lock; lk != nil {
		// A node that may not write unbinds or waits; one that may deletes
		// its own lock, or a dead holder's when it ranks first.
		other := v
		other.Writable = !v.Writable
		d.ReadWritable = orphanRule(other, ip).Action != d.Action
	}
	return d
}

func orphanRule(v View, ip IP) Decision {
	lk := ip.Lock
	if lk == nil || !v.Writable {
		if ip.Bound {
			return Decision{Action: Unbind, Reason: "not named by any Service"}
		}
		return Decision{Reason: "not named by any Service"}
	}
	if lk.Holder == v.Self {
		return Decision{Action: Delete, Reason: "not named by any Service"}
	}
	unbind := Decision{Action: Unbind, Reason: "not named by any Service"}
	if lk.Holder != "" && v.Keeps(lk.Holder) {
		if ip.Bound {
			return unbind
		}
		return Decision{Reason: "orphan; its live holder deletes it"}
	}
	alive := v.Live
	if !v.Eligible {
		alive = append([]string{v.Self}, alive...)
	}
	if Rank(ip.Addr, v.Self, alive) == 0 {
		// Bound here (its successor), it is unbound first, as every
		// Delete is.
		return Decision{Action: Delete, Reason: "orphan of a dead or absent holder"}
	}
	if ip.Bound {
		return unbind
	}
	return Decision{Reason: "orphan; a better-ranked node deletes it"}
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

func (v View) isLive(node string) bool {
	for _, n := range v.Live {
		if n == node {
			return true
		}
	}
	return false
}

// best is the best-ranked live eligible node for ip other than except,
// or "" when there is none. It is Order's first such node, found without
// sorting: every held IP asks it at every full pass.
func (v View) best(ip netip.Addr, except string) string {
	var top string
	var topScore uint64
	for _, n := range v.Live {
		if n == except {
			continue
		}
		if s := score(ip, n); top == "" || s > topScore || s == topScore && n < top {
			top, topScore = n, s
		}
	}
	return top
}

// holderBack says whether the holder of ip's lock, another node, keeps
// it from its successor: while it is alive, and, once this node (the
// successor) has bound the IP, only while it is seen renewing. A break of
// the watch or of the LAN presumes every node alive for a while; a
// successor that unbound what it had taken over each time did so for
// thousands of IPs at once on a loaded API server, and took them again.
func (v View) holderBack(ip IP) bool {
	h := ip.Lock.Holder
	if _, gone := v.gone(h); gone {
		return false
	}
	if ip.Bound && ip.Lock.Successor == v.Self && v.Renewing != nil {
		return v.Renewing(h)
	}
	return v.Alive(h)
}

// successorFor is the successor a lock naming holder names for ip: its
// Next when that is a live node other than holder, else the best-ranked
// live node other than holder ("" when there is none).
func (v View) successorFor(ip IP, holder string) string {
	if n := ip.Next; n != "" && n != holder && v.isLive(n) {
		return n
	}
	return v.best(ip.Addr, holder)
}

// BestPeer is the node an IP goes to when this node gives it away (at
// shutdown) without a planned target: the best-ranked live eligible peer,
// or "" when there is none.
func (v View) BestPeer(ip netip.Addr) string { return v.best(ip, v.Self) }

// SuccessorOf is the successor a lock handing ip to target names: the
// best-ranked live eligible node other than target, or "".
func (v View) SuccessorOf(ip netip.Addr, target string) string { return v.best(ip, target) }

// Fenced reports whether a node in api-loss=fence mode must unbind
// everything: its last successful renewal was sent at least fenceAfter ago.
func Fenced(lastRenewSent, now time.Time, fenceAfter time.Duration) bool {
	return !lastRenewSent.IsZero() && now.Sub(lastRenewSent) >= fenceAfter
}
