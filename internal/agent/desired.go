package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/policy"
)

// desired is what this node is asked to manage: the configuration in
// force, and the IPs the Services name within it.
type desired struct {
	cfg       config.Config
	cfgLoaded bool   // a good configuration is in force
	cfgErr    string // why the current ConfigMap is not in force
	cfgRV     string // resourceVersion of the ConfigMap last parsed
	cfgGone   bool   // the ConfigMap was deleted after a good one was loaded

	entries   map[netip.Addr]ipset.Entry
	order     []managed
	names     map[string]netip.Addr // each managed IP's lock name to it
	preferred map[netip.Addr][]string
	reserved  map[netip.Addr]string
	rejected  map[string]bool // "svc ip reason" already reported
	// next is where the policy puts each IP were this node gone (plan).
	next map[netip.Addr]string
}

// lateAfter is how long after the loop's last tick it counts as late
// (loopLate): the margin that an address given its lifetime at the last
// tick had before peers judging by heartbeats could take it, lease-duration −
// lifetime − the kernel's expiry slack (0.75 s at the defaults), and at
// least one and a half renew intervals (375 ms at a 1 s lease, where that
// margin is below 0), so that a pass between two ticks may still bind.
func (d *desired) lateAfter() time.Duration {
	return max(d.cfg.LeaseDuration-d.cfg.AddressLifetime()-addressExpirySlack, d.cfg.RenewInterval*3/2)
}

// stallAfter is how long after the one before a tick marks the loop
// stalled (tick): lease-duration − renew-interval (1.5 s at the
// defaults), and at least lateAfter. Its peers saw no renewal for that
// long, and the next one may not reach them before they judge this node
// dead.
func (d *desired) stallAfter() time.Duration {
	return max(d.cfg.LeaseDuration-d.cfg.RenewInterval, d.lateAfter())
}

// reservationGrace is how long a reservation whose Service this node does
// not know is kept after this node first saw the lock: the Service may not
// have reached this node's Service cache yet, though its reservation reached
// the Lease cache. A lease duration is ample for that. It counts from the
// lock's first sighting, not from when it became an orphan, so that
// deleting a Service releases its address at once.
func (d *desired) reservationGrace() time.Duration { return d.cfg.LeaseDuration }

// allocStep is how long a node waits per rank before allocating for a
// Service: a reservation and a status write, two round trips, with margin.
func (d *desired) allocStep() time.Duration { return 4 * d.cfg.RankStep() }

// lifetimeOn is the lifetime of an address bound on one of eipd's own
// devices (none) or on its interface.
func (d *desired) lifetimeOn(onDevice bool) time.Duration {
	if onDevice {
		return 0
	}
	return d.cfg.AddressLifetime()
}

// lanTimings are what the speaker's fan-out needs of the configuration.
func (d *desired) lanTimings() lanTimings {
	return lanTimings{renew: d.cfg.RenewInterval, suspect: d.suspectAfter(), duration: d.cfg.LeaseDuration}
}

// suspectAfter is how old a sign of a peer may grow before this node asks
// it directly (lease.SuspectAfter).
func (d *desired) suspectAfter() time.Duration {
	return lease.SuspectAfter(d.cfg.LeaseDuration, d.cfg.FenceAfter, d.cfg.RenewInterval)
}

// configuredIfaces are the interface names the configuration names
// explicitly ("auto" resolves per IP).
func (d *desired) configuredIfaces() []string {
	var out []string
	for _, r := range d.cfg.Ranges {
		if r.Iface != "auto" && r.Iface != "" && !slices.Contains(out, r.Iface) {
			out = append(out, r.Iface)
		}
	}
	return out
}

// missing: the ConfigMap named name is not found. The first time (first)
// the defaults are in force, with nothing configured; once a good one was
// loaded it stays in force, and why is kept for the status (gone, the
// first time it is seen gone).
func (d *desired) missing(name string) (first, gone bool) {
	if !d.cfgLoaded {
		d.cfgLoaded = true
		return true, false
	}
	if d.cfgRV != "" && !d.cfgGone {
		d.cfgGone = true
		d.cfgErr = fmt.Sprintf("ConfigMap %s was deleted; keeping the last good configuration", name)
		return false, true
	}
	return false, false
}

// read: the ConfigMap is there at resourceVersion rv; it says whether that
// version is one not parsed yet.
func (d *desired) read(rv string) (fresh bool) {
	d.cfgGone = false
	if rv == d.cfgRV {
		return false
	}
	d.cfgRV = rv
	return true
}

// refuse keeps why the ConfigMap read is not in force; the last good
// configuration is, or, before any was, none (the ConfigMap kept, which
// held none either, is named).
func (d *desired) refuse(err error, kept string) {
	if !d.cfgLoaded {
		d.cfgErr = fmt.Sprintf("invalid configuration, and no last good one is kept (%s): nothing is bound here: %v", kept, err)
		return
	}
	d.cfgErr = fmt.Sprintf("invalid configuration, keeping the last good one: %v", err)
}

// apply puts cfg in force and returns the configuration before it. why is
// why the ConfigMap itself is not in force ("" when cfg is the ConfigMap's).
func (d *desired) apply(cfg config.Config, why string) (old config.Config) {
	d.cfgErr = why
	old = d.cfg
	d.cfg, d.cfgLoaded = cfg, true
	return old
}

// recheck has the ConfigMap parsed and checked again at its next read,
// though its version did not change.
func (d *desired) recheck() { d.cfgRV = "" }

// reserve keeps the addresses never to be bound (the nodes' and the
// control plane's).
func (d *desired) reserve(r map[netip.Addr]string) { d.reserved = r }

// manage takes entries, the IPs the Services name within the
// configuration in force, as those to manage.
func (d *desired) manage(entries []ipset.Entry) {
	d.entries = make(map[netip.Addr]ipset.Entry, len(entries))
	d.order = d.order[:0]
	d.preferred = map[netip.Addr][]string{}
	d.names = make(map[string]netip.Addr, len(entries))
	for _, e := range entries {
		name := lease.NameFor(e.IP)
		d.entries[e.IP] = e
		d.names[name] = e.IP
		d.order = append(d.order, managed{ip: e.IP, name: name})
		if p := e.Preferred; len(p) > 0 {
			d.preferred[e.IP] = p
		} else if len(d.cfg.PreferredNodes) > 0 {
			d.preferred[e.IP] = d.cfg.PreferredNodes
		}
	}
}

// newRejections records the rejections made now and returns those not
// made before; it forgets the ones no longer made.
func (d *desired) newRejections(rejected []ipset.Rejection) []ipset.Rejection {
	var fresh []ipset.Rejection
	seen := make(map[string]bool, len(rejected))
	for _, r := range rejected {
		key := r.Service + " " + r.IP + " " + r.Reason
		seen[key] = true
		if !d.rejected[key] {
			d.rejected[key] = true
			fresh = append(fresh, r)
		}
	}
	for key := range d.rejected {
		if !seen[key] {
			delete(d.rejected, key)
		}
	}
	return fresh
}

// plan asks the policy where the IPs should be, their locks seen as seen
// (by index in order), only where a Local Service's IPs may live, and
// pending the holders the ownership writes in flight name. It also keeps,
// in next, where the policy would put the IPs this node holds or takes
// were this node gone: the successors their locks name (lease.IP.Next),
// so that a dead node's IPs go where the policy wants them without a
// second move.
func (d *desired) plan(v lease.View, seen []*lease.Kept, only map[netip.Addr]lease.Only, pending map[string]string) map[netip.Addr]string {
	holders := map[netip.Addr]string{}
	for i, m := range d.order {
		if d.cfg.Policy != config.PolicySpread && len(d.preferred[m.ip]) == 0 {
			// The sticky plan moves only IPs with a preferred node.
			continue
		}
		holders[m.ip] = plannedHolder(v, pending, m.name, seen[i])
	}
	in := policy.Input{Policy: d.cfg.Policy, Live: v.Live, Holders: holders, Preferred: d.preferred, Only: only}
	plan := policy.Plan(in)
	for ip, h := range holders {
		if h == v.Self {
			holders[ip] = ""
		}
	}
	in.Live = slices.DeleteFunc(slices.Clone(v.Live), func(n string) bool { return n == v.Self })
	d.next = policy.Plan(in)
	return plan
}

// plannedHolder is the holder the policy plans from: the lock's, or the
// one an ownership write in flight names (planning again from the old
// holder would hand off other IPs for a move already under way); "" when
// not live.
func plannedHolder(v lease.View, pending map[string]string, name string, l *lease.Kept) string {
	h, moving := pending[name]
	if !moving && l != nil {
		h = l.Holder
	}
	if !slices.Contains(v.Live, h) {
		return ""
	}
	return h
}

// planOne is plan for one IP. Only the sticky plan of an IP depends on
// that IP alone; under spread every pass is a full one (fullDue).
func (d *desired) planOne(v lease.View, ip netip.Addr, name string, l *lease.Kept, only map[netip.Addr]lease.Only, pending map[string]string) string {
	in := policy.Input{Policy: d.cfg.Policy, Live: v.Live,
		Holders: map[netip.Addr]string{ip: plannedHolder(v, pending, name, l)}, Preferred: map[netip.Addr][]string{ip: d.preferred[ip]}}
	if o, ok := only[ip]; ok {
		in.Only = map[netip.Addr]lease.Only{ip: o}
	}
	return policy.Plan(in)[ip]
}

// lockWriteTimeout is how long a lock write may take: twice the lease
// duration, at least 4 s. A write that times out at its writer may still
// be carried out, and is taken for congestion (the window halves). When a
// node of fifty died, their API server answered the takeovers in up to
// 2.4 s, and with the lease duration (2 s) as the timeout half of them
// timed out, 23 after the API server had taken them: their nodes' windows
// fell to one at a time, with pauses, and each sent the write again on
// the lock it had read, a certain conflict.
func (d *desired) lockWriteTimeout() time.Duration {
	return max(2*d.cfg.LeaseDuration, 4*time.Second)
}
