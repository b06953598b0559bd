package cli

import "github.com/eip-project/eip/internal/lease"

// State is what is happening to one IP.
type State string

// The states of an IP, in the order an operator would look for trouble.
const (
	// StateBound: the lock's holder is alive; its daemon binds the IP as
	// soon as it holds the lock, so the IP is on that node.
	StateBound State = "bound"
	// StateMoving: a move to Moving.To is requested and not yet done.
	StateMoving State = "moving"
	// StateUnbound: a Service names the IP inside a range, but no live node
	// holds it: no lock yet, a lock without holder, or a dead holder (the
	// live nodes are racing for it).
	StateUnbound State = "unbound"
	// StateOutOfRange: a Service names the IP but it lies outside every
	// configured range (or none are configured); eip never binds it.
	StateOutOfRange State = "out-of-range"
	// StateRefused: a Service names the IP inside a range, but eip never
	// binds it: a node's own address, a special-purpose address, the
	// network or broadcast address of a range, an address of a range kept
	// for other namespaces, spec.externalIPs with external-ips off, or not
	// an IP at all.
	StateRefused State = "refused"
	// StateOrphan: a lock exists but no Service names the IP; its holder
	// (or the top-ranked live node) deletes the lock.
	StateOrphan State = "orphan"
	// StateConflict: the holder does not bind the IP because a machine
	// that is not an eip node answers for it (IP.ConflictMAC); it probes
	// again until that machine lets go.
	StateConflict State = "conflict"
	// StateNoEndpoints: every Service of the IP that names it with
	// externalTrafficPolicy: Local needs a node with a ready endpoint of
	// its own, and no node has one of each: kube-proxy would drop its
	// traffic anywhere, so no node binds it.
	StateNoEndpoints State = "no-endpoints"
)

// ipState decides the state of one IP and explains it.
func ipState(named, rejected bool, rejection string, lk *lease.Lock, holder *Node, known bool) (State, string) {
	switch {
	case rejected:
		why := rejection
		if lk != nil && lk.Holder != "" {
			why += "; " + lk.Holder + " unbinds it and deletes the lock"
		}
		if rejection == "outside every configured range" || rejection == "no ranges are configured" {
			return StateOutOfRange, why
		}
		return StateRefused, why
	case !named && lk != nil:
		return StateOrphan, "no Service names it; the lock is being deleted"
	case lk == nil:
		if !known {
			return StateUnbound, "no lock yet (the configuration is invalid, so whether it lies in a range is unknown)"
		}
		return StateUnbound, "no lock yet"
	case lk.MoveTo != "":
		return StateMoving, "move to " + lk.MoveTo + " requested"
	case lk.Holder == "":
		return StateUnbound, "the lock has no holder"
	case holder == nil || !holder.heartbeat:
		return StateUnbound, "holder " + lk.Holder + " has no heartbeat; live nodes take it over"
	case !holder.Alive:
		return StateUnbound, "holder " + lk.Holder + " is not alive; live nodes take it over"
	case !holder.Eligible:
		return StateBound, "holder is not eligible (" + holder.Reason + "); it hands the IP to a live eligible node"
	}
	return StateBound, ""
}
