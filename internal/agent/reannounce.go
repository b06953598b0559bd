package agent

import (
	"log/slog"
	"net/netip"
	"slices"
	"time"
)

// reannounceRate bounds the held IPs a node announces again a second
// (announce-interval): beyond reannounceRate × the interval, a round lasts
// IPs ÷ reannounceRate instead. At 10,000 IPs and the shortest interval,
// 10 s, that is 2,000 frames a second of 60 bytes for IPv4.
const reannounceRate = 1000

// reannounceSlot groups the re-announcements into the loop's wakes, at
// most ten a second, each of at most a slot's share of the rate.
const reannounceSlot = 100 * time.Millisecond

// reannouncer paces the periodic announcement of the IPs a node holds
// (config.Config.AnnounceInterval): each round announces the IPs held
// when it began once each, in address order, spread evenly over it, so
// that 10,000 IPs never go out in one burst. An IP bound during a round
// was announced by its bind and waits for the next round. It holds no
// pointer to the loop's state; the loop calls it with the time.
type reannouncer struct {
	every  time.Duration // the interval the round was planned for; 0: off
	start  time.Time     // when the round began
	length time.Duration // how long it lasts: every, or longer at the rate's bound
	round  []netip.Addr  // the round's IPs, in address order
	sent   int           // how many of round are announced

	announcer Announcer
	log       *slog.Logger
}

// announce announces again the IPs of bound due at now (every being the
// interval), on the LAN, if this node may bind (may): a node whose loop
// runs late, that fenced, or whose lock view may be stale could be
// announcing an IP a peer has taken over since. The IPs due meanwhile are
// skipped, not sent later in a burst; the next round has them.
func (r *reannouncer) announce(now time.Time, every time.Duration, bound map[netip.Addr]binding, may bool) {
	due := r.due(now, every, func() []netip.Addr { return announced(bound) })
	if len(due) == 0 || !may {
		return
	}
	byIface := map[string][]netip.Addr{}
	for _, ip := range due {
		if b, ok := bound[ip]; ok && b.announce.ARP() && !b.missing {
			byIface[b.iface] = append(byIface[b.iface], ip)
		}
	}
	for iface, ips := range byIface {
		if err := r.announcer.Reannounce(iface, ips...); err != nil {
			r.log.Warn("announce again", "iface", iface, "err", err)
		}
	}
}

// reannounceLate is how long an IP of the round may have been due and
// still be sent: one due longer ago (the loop ran late) waits for the
// next round, so that a late loop sends at most a second's share at once.
const reannounceLate = time.Second

// due returns the IPs to announce again at now, every being the interval
// (0: off), and held listing the IPs held then, asked only when a round
// begins. A round begins when the last is over or the interval changed.
func (r *reannouncer) due(now time.Time, every time.Duration, held func() []netip.Addr) []netip.Addr {
	if every != r.every {
		r.every, r.start, r.length, r.round, r.sent = every, time.Time{}, 0, nil, 0
	}
	if every <= 0 {
		return nil
	}
	var out []netip.Addr
	if !r.start.IsZero() && !now.Before(r.start.Add(r.length)) {
		// The round is over: its last IPs were due before its end.
		out = append(out, r.round[max(r.sent, r.dueBy(now.Add(-reannounceLate))):]...)
		r.start = time.Time{}
	}
	if r.start.IsZero() {
		r.round = held()
		slices.SortFunc(r.round, netip.Addr.Compare)
		r.start, r.sent = now, 0
		r.length = max(every, time.Duration(len(r.round))*time.Second/reannounceRate)
	}
	from, to := max(r.sent, r.dueBy(now.Add(-reannounceLate))), r.dueBy(now)
	if to > from {
		out = append(out, r.round[from:to]...)
	}
	r.sent = max(r.sent, to)
	return out
}

// dueBy is how many IPs of the round are due at t: the i-th at start +
// i × length ÷ IPs.
func (r *reannouncer) dueBy(t time.Time) int {
	if t.Before(r.start) {
		return 0
	}
	n := len(r.round)
	return min(n, int(int64(t.Sub(r.start))*int64(n)/int64(r.length))+1)
}

// next is when the re-announcements next need the loop, at the end of
// that slot: the next IP of the round, or the next round; zero when off.
func (r *reannouncer) next() time.Time {
	if r.every <= 0 || r.start.IsZero() {
		return time.Time{}
	}
	t := r.start.Add(r.length)
	if n := len(r.round); r.sent < n {
		t = r.start.Add(time.Duration(int64(r.length) * int64(r.sent) / int64(n)))
	}
	if rem := t.Sub(t.Truncate(reannounceSlot)); rem > 0 {
		t = t.Add(reannounceSlot - rem)
	}
	return t
}

// announced lists the IPs of bound announced on the LAN.
func announced(bound map[netip.Addr]binding) []netip.Addr {
	var out []netip.Addr
	for ip, b := range bound {
		if b.announce.ARP() {
			out = append(out, ip)
		}
	}
	return out
}
