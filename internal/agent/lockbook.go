package agent

import (
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/eip-project/eip/internal/lease"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// lockBook is the locks as this node sees them beyond its cache: its own
// writes the cache does not show yet, its deletions, and what it already
// warned about.
type lockBook struct {
	log *slog.Logger
	// written are this node's successful lock writes until the cache
	// shows them (effective); seen is the Leases' cache's progress, read
	// before the cache's copies that a pass compares with them.
	written  map[string]*lease.Kept
	seen     string
	deleted  map[string]string // lock name -> resourceVersion we deleted
	badLocks map[string]string // lock name -> resourceVersion already warned about
	// freeSince is when each IP was first seen free, or held by a node
	// never seen alive.
	freeSince map[netip.Addr]time.Time
	// read is the lock being decided (lockOf): one for the loop, which
	// decides one IP at a time, where a lock read by each decision was
	// 10,000 allocations a full pass (lease.Decide's results hold what
	// it is given, so the compiler cannot keep one on the stack).
	read lease.Lock
	// resolutions counts the locks worked out (effective), for tests: a
	// full pass works out each lock once.
	resolutions int
	// managed and others are the locks a full pass works out once
	// (resolvePass) and everything in it reads: managed by the index of
	// the IP in desired.order, others by name (the locks of IPs no
	// Service names, and this node's writes the cache does not show yet).
	managed []*lease.Kept
	others  map[string]*lease.Kept
}

func newLockBook(log *slog.Logger) lockBook {
	return lockBook{
		log:       log,
		written:   map[string]*lease.Kept{},
		deleted:   map[string]string{},
		badLocks:  map[string]string{},
		freeSince: map[netip.Addr]time.Time{},
		others:    map[string]*lease.Kept{},
	}
}

// resolvePass works out, once for the full pass under way, every lock as
// this node sees it: the managed IPs' (order, by index, whose lock names
// are names) and the others' from the cache's locks and this node's own
// writes. The plan, the allocation and the decisions read them; the
// slice returned is the book's, until passDone.
func (b *lockBook) resolvePass(order []managed, names map[string]netip.Addr, locks map[string]*lease.Kept) []*lease.Kept {
	b.managed = slices.Grow(b.managed[:0], len(order))[:len(order)]
	for i, m := range order {
		b.managed[i] = b.effective(m.name, locks[m.name])
	}
	for name, l := range locks {
		if _, named := names[name]; !named {
			b.others[name] = b.effective(name, l)
		}
	}
	for name := range b.written {
		_, named := names[name]
		if _, cached := locks[name]; !named && !cached {
			b.others[name] = b.effective(name, nil)
		}
	}
	return b.managed
}

// other is the lock named name of an IP no Service names, as the full
// pass under way worked it out (resolvePass).
func (b *lockBook) other(name string) *lease.Kept { return b.others[name] }

// eachSeen hands f every lock the full pass under way worked out.
func (b *lockBook) eachSeen(f func(*lease.Kept)) {
	for _, l := range b.managed {
		if l != nil {
			f(l)
		}
	}
	for _, l := range b.others {
		if l != nil {
			f(l)
		}
	}
}

// passDone lets go of the locks of the full pass that ended.
func (b *lockBook) passDone() {
	clear(b.managed)
	b.managed = b.managed[:0]
	clear(b.others)
}

// newPass starts a pass that reads the Leases' cache after seen (its
// progress, read first). A full pass (full) also makes small the maps
// that held many IPs (shrink).
func (b *lockBook) newPass(seen string, full bool) {
	b.seen = seen
	if full {
		b.freeSince = shrink(b.freeSince)
		b.written = shrink(b.written)
	}
}

// effective is the lock as this node should see it: the cache, or our own
// write when the cache has not caught up with it yet.
func (b *lockBook) effective(name string, cached *lease.Kept) *lease.Kept {
	b.resolutions++
	if rv, ok := b.deleted[name]; ok {
		if cached != nil && cached.ResourceVersion == rv {
			return nil
		}
		delete(b.deleted, name)
	}
	w, ok := b.written[name]
	if !ok {
		return cached
	}
	if cached == nil {
		// Our write created it, and the cache shows it once the watch
		// delivered it; if the cache held Lease writes as new before it
		// was read and not this one, someone deleted it since. Given up a
		// lease duration after the write, a lock that fifty nodes' loaded
		// API server delivered 3.7 s late was taken for none: its holder
		// unbound the IP ("bound without a lock") or created it again.
		// Judged by the progress read after the cache, a lock delivered
		// in between was taken for one deleted.
		if b.seen == "" || lease.Newer(w.ResourceVersion, b.seen) {
			return w
		}
	} else if lease.Newer(w.ResourceVersion, cached.ResourceVersion) {
		return w
	}
	delete(b.written, name)
	return cached
}

// warnBadLock logs, once per version, a lock damaged by hand and what this
// node does about it.
func (b *lockBook) warnBadLock(l *lease.Kept, effect string) {
	if b.badLocks[l.Name] == l.ResourceVersion {
		return
	}
	b.badLocks[l.Name] = l.ResourceVersion
	b.log.Warn("damaged lock: "+effect, "lease", l.Name, "err", l.Err)
}

// lockOf reads l for ip into the lock being decided and returns it, or
// nil without a lock. A
// lock damaged by hand (garbage annotations) is still a lock: its holder
// is honoured and its next write repairs it.
func (b *lockBook) lockOf(ip netip.Addr, l *lease.Kept) *lease.Lock {
	lk := &b.read
	if l == nil {
		return nil
	}
	*lk = l.Lock
	if l.Err != nil {
		b.warnBadLock(l, "its holder is honoured until its next owner writes it whole")
		lk.IP = ip
	}
	return lk
}

// wrote records a successful lock write until the cache shows it.
func (b *lockBook) wrote(r writeResult) {
	if r.action == lease.Delete {
		b.deleted[r.name] = r.rv
		delete(b.written, r.name)
		return
	}
	b.written[r.name] = lease.Keep(r.out, nil)
}

// created records the locks an allocation created (reserved).
func (b *lockBook) created(locks []*coordinationv1.Lease) {
	for _, l := range locks {
		b.written[l.Name] = lease.Keep(l, nil)
	}
}

// free records whether ip's lock leaves it free (no lock, no holder, or a
// holder never seen alive) at now, and returns since when it has been.
func (b *lockBook) free(ip netip.Addr, free bool, now time.Time) time.Time {
	if !free {
		delete(b.freeSince, ip)
		return time.Time{}
	}
	since, ok := b.freeSince[ip]
	if !ok {
		since = now
		b.freeSince[ip] = since
	}
	return since
}

// forgetFree forgets when ip became free: no Service names it.
func (b *lockBook) forgetFree(ip netip.Addr) { delete(b.freeSince, ip) }

// keepFree forgets when the IPs that named does not hold became free.
func (b *lockBook) keepFree(named func(netip.Addr) bool) {
	for ip := range b.freeSince {
		if !named(ip) {
			delete(b.freeSince, ip)
		}
	}
}

// heldAtStop are the IPs of order to hand off at a stop, by their index:
// those whose lock, as seen, names this node, with no write in flight
// (inflight), while it may write and is not out of service.
func (b *lockBook) heldAtStop(v lease.View, order []managed, seen []*lease.Kept, inflight map[string]bool) []int {
	if _, gone := v.Gone(v.Self); gone || !v.Writable {
		// Out of service (lease.View.Gone): its successors are taking
		// its IPs over, binding before they write. A hand-off now would
		// have its target bind without a probe beside one of them. Its
		// addresses went already; the rest are theirs.
		return nil
	}
	var held []int
	for i, m := range order {
		if lk := b.lockOf(m.ip, seen[i]); lk != nil && lk.Holder == v.Self && !inflight[m.name] {
			held = append(held, i)
		}
	}
	return held
}
