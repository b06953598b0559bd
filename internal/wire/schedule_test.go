package wire

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

const (
	holderMAC   = "02:00:00:00:00:01"
	strangerMAC = "02:00:00:00:00:99"
)

var t0 = time.Unix(1765000000, 0)

func macsOf(node string) []string {
	if node == "h" {
		return []string{holderMAC}
	}
	return nil
}

// wire plays the LAN: who answers a probe for each IP.
type wire map[netip.Addr][]string

// run steps s from *now for d in steps of tick, answering each probe as w
// says, and returns the probes sent per IP and the verdict changes.
func run(s *Schedule, w wire, now *time.Time, d, tick time.Duration) (sent map[netip.Addr][]time.Time, changes []netip.Addr) {
	sent = map[netip.Addr][]time.Time{}
	for end := now.Add(d); now.Before(end); *now = now.Add(tick) {
		for _, ip := range s.Due(*now) {
			sent[ip] = append(sent[ip], *now)
			for _, mac := range w[ip] {
				s.Answer(ip, mac, now.Add(time.Millisecond))
			}
		}
		changes = append(changes, s.Finish(*now, macsOf)...)
	}
	return sent, changes
}

// set makes ips the IPs s verifies.
func set(s *Schedule, ips map[netip.Addr]string, now time.Time) {
	for ip := range s.ips {
		if h, ok := ips[ip]; !ok || h != s.ips[ip].holder {
			s.Untrack(ip)
		}
	}
	for ip, h := range ips {
		s.Track(ip, h, now)
	}
}

func ips(n int) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for i := range n {
		out[netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})] = "h"
	}
	return out
}

func TestScheduleHealthyQuiet(t *testing.T) {
	s := NewSchedule(DefaultPace, 1)
	now := t0
	all := ips(3)
	set(s, all, now)
	w := wire{}
	for ip := range all {
		w[ip] = []string{holderMAC}
	}
	_, changes := run(s, w, &now, 2*time.Second, 10*time.Millisecond)
	assert.Equal(t, len(changes), 3, "each IP's first verdict is a change")
	for ip := range all {
		e, ok := s.Verdict(ip)
		assert.Assert(t, ok)
		assert.Equal(t, e.Verdict, Holder)
	}
	before := s.Report(now).Format()
	sent, changes := run(s, w, &now, time.Minute, 10*time.Millisecond)
	assert.Equal(t, len(changes), 0, "no change while the wire does not change")
	assert.Equal(t, s.Report(now).Format(), before)
	assert.Equal(t, before, "", "nothing to report")
	for ip, times := range sent {
		for i := 1; i < len(times); i++ {
			gap := times[i].Sub(times[i-1])
			assert.Assert(t, gap <= DefaultPace.Every+10*time.Millisecond && gap >= DefaultPace.Every*3/4-10*time.Millisecond, "%s: gap %s", ip, gap)
		}
	}
}

func TestScheduleRateBound(t *testing.T) {
	p := DefaultPace
	p.Rate = 50
	s := NewSchedule(p, 2)
	now := t0
	all := ips(1000)
	set(s, all, now)
	w := wire{}
	for ip := range all {
		w[ip] = []string{holderMAC}
	}
	sent, _ := run(s, w, &now, time.Minute, 50*time.Millisecond)
	total := 0
	for ip := range all {
		times := sent[ip]
		total += len(times)
		assert.Assert(t, len(times) >= 2, "%s checked %d times in a minute", ip, len(times))
		for i := 1; i < len(times); i++ {
			// 1,000 IPs at 50/s: a round takes 20 s.
			assert.Assert(t, times[i].Sub(times[i-1]) <= 21*time.Second, "%s: gap %s", ip, times[i].Sub(times[i-1]))
		}
	}
	assert.Assert(t, float64(total) <= p.Rate*60+p.Rate, "%d probes in a minute at %v/s", total, p.Rate)
}

// A node with more IPs than its rate allows in Every is woken when a
// probe may go, not before: Next never says "now" to a Due that sends
// nothing.
func TestScheduleNextWaitsForTheRate(t *testing.T) {
	p := DefaultPace
	p.Rate = 10
	s := NewSchedule(p, 8)
	now := t0
	set(s, ips(100), now)
	idle := 0
	for end := now.Add(10 * time.Second); now.Before(end); {
		next, ok := s.Next()
		assert.Assert(t, ok)
		assert.Assert(t, next.After(now) || idle == 0, "woken again at %s for nothing", next.Sub(t0))
		now = later(now, next)
		if len(s.Due(now)) == 0 && !s.finishes(now) {
			idle++
		} else {
			idle = 0
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// finishes judges the checks whose wait is over and says whether there
// were any.
func (s *Schedule) finishes(now time.Time) bool {
	out := 0
	for _, c := range s.ips {
		if !c.sent.IsZero() && now.Sub(c.sent) >= s.pace.Wait {
			out++
		}
	}
	s.Finish(now, macsOf)
	return out > 0
}

func TestScheduleNoAnswerNeedsTries(t *testing.T) {
	s := NewSchedule(DefaultPace, 3)
	now := t0
	ip := netip.MustParseAddr("198.18.0.10")
	set(s, map[netip.Addr]string{ip: "h"}, now)
	w := wire{ip: {holderMAC}}
	run(s, w, &now, time.Second, 10*time.Millisecond)
	e, _ := s.Verdict(ip)
	assert.Equal(t, e.Verdict, Holder)

	delete(w, ip) // the holder's answers stop reaching the LAN
	lost := now
	var sent map[netip.Addr][]time.Time
	var changes []netip.Addr
	for e.Verdict == Holder {
		var more map[netip.Addr][]time.Time
		more, changes = run(s, w, &now, 10*time.Millisecond, 10*time.Millisecond)
		if sent == nil {
			sent = more
		} else {
			sent[ip] = append(sent[ip], more[ip]...)
		}
		e, _ = s.Verdict(ip)
	}
	assert.Assert(t, slices.Equal(changes, []netip.Addr{ip}), changes)
	assert.Equal(t, e.Verdict, NoAnswer)
	assert.Equal(t, len(sent[ip]), DefaultPace.Tries, "NoAnswer after %d unanswered checks in a row", DefaultPace.Tries)
	took := now.Sub(lost)
	bound := DefaultPace.Every + time.Duration(DefaultPace.Tries)*(DefaultPace.Recheck+DefaultPace.Wait)
	assert.Assert(t, took <= bound, "NoAnswer after %s, more than %s", took, bound)
	assert.Equal(t, s.Report(now).Format(), "198.18.0.10=none@"+strconv.FormatInt(e.Since.Unix(), 10))

	// One answer is enough to be believed again.
	w[ip] = []string{holderMAC}
	_, changes = run(s, w, &now, time.Second, 10*time.Millisecond)
	assert.Assert(t, slices.Equal(changes, []netip.Addr{ip}), changes)
	e, _ = s.Verdict(ip)
	assert.Equal(t, e.Verdict, Holder)
}

func TestScheduleStrangerAtOnce(t *testing.T) {
	s := NewSchedule(DefaultPace, 4)
	now := t0
	ip := netip.MustParseAddr("198.18.0.11")
	set(s, map[netip.Addr]string{ip: "h"}, now)
	w := wire{ip: {holderMAC}}
	run(s, w, &now, time.Second, 10*time.Millisecond)
	w[ip] = []string{holderMAC, strangerMAC}
	start := now
	var changes []netip.Addr
	for len(changes) == 0 {
		_, changes = run(s, w, &now, 10*time.Millisecond, 10*time.Millisecond)
	}
	assert.Assert(t, now.Sub(start) <= DefaultPace.Every+DefaultPace.Wait+10*time.Millisecond)
	e, _ := s.Verdict(ip)
	assert.DeepEqual(t, e, Entry{Verdict: TwoMACs, MACs: []string{holderMAC, strangerMAC}, Since: e.Since})

	// The holder lets go; the stranger keeps it: a new verdict.
	w[ip] = []string{strangerMAC}
	_, changes = run(s, w, &now, time.Second, 10*time.Millisecond)
	assert.Assert(t, slices.Equal(changes, []netip.Addr{ip}), changes)
	e, _ = s.Verdict(ip)
	assert.Equal(t, e.Verdict, Stranger)
	assert.DeepEqual(t, e.MACs, []string{strangerMAC})
	// It stays one, and is checked at the recheck pace meanwhile.
	sent, changes := run(s, w, &now, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, len(changes), 0)
	assert.Assert(t, len(sent[ip]) >= 6, "%d checks in 5 s", len(sent[ip]))
}

// An answer read after the wait but before the check is judged counts: a
// busy checker reads late, and the holder did answer. An answer for an IP
// verified elsewhere is nobody's.
func TestScheduleAnswerCountsUntilJudged(t *testing.T) {
	s := NewSchedule(DefaultPace, 5)
	now := t0
	ip := netip.MustParseAddr("198.18.0.12")
	set(s, map[netip.Addr]string{ip: "h"}, now)
	for s.Due(now) == nil {
		now = now.Add(10 * time.Millisecond)
	}
	s.Answer(ip, holderMAC, now.Add(DefaultPace.Wait+DefaultPace.Late))
	s.Answer(netip.MustParseAddr("198.18.0.99"), strangerMAC, now) // not verified here
	s.Finish(now.Add(DefaultPace.Wait+DefaultPace.Late+time.Millisecond), macsOf)
	e, _ := s.Verdict(ip)
	assert.Equal(t, e.Verdict, Holder)
	_, ok := s.Verdict(netip.MustParseAddr("198.18.0.99"))
	assert.Assert(t, !ok)
}

// Silence judged later than Late after the wait is no verdict: a checker
// that was not running (its CPU quota spent) may not have read the
// answers waiting for it. However often that happens, the IP is never
// judged unanswered; judged in time, Tries unanswered checks are.
func TestScheduleLateSilenceIsNoVerdict(t *testing.T) {
	s := NewSchedule(DefaultPace, 6)
	now := t0
	ip := netip.MustParseAddr("198.18.0.13")
	set(s, map[netip.Addr]string{ip: "h"}, now)
	late := DefaultPace.Wait + DefaultPace.Late + time.Millisecond
	sent := 0
	for end := now.Add(time.Minute); now.Before(end); now = now.Add(late) {
		sent += len(s.Due(now))
		s.Finish(now, macsOf)
	}
	assert.Assert(t, sent > 2*DefaultPace.Tries, "only %d checks sent", sent)
	e, _ := s.Verdict(ip)
	assert.Equal(t, e.Verdict, Unchecked)
	run(s, wire{}, &now, 10*time.Second, 10*time.Millisecond)
	e, _ = s.Verdict(ip)
	assert.Equal(t, e.Verdict, NoAnswer)
}

// Answers that may have been lost (the checker's socket overflowed) make
// the silence counted so far no evidence: the check out is asked again,
// and NoAnswer needs Tries unanswered checks after the loss.
func TestScheduleLostAnswersStartOver(t *testing.T) {
	s := NewSchedule(DefaultPace, 7)
	now := t0
	ip := netip.MustParseAddr("198.18.0.14")
	set(s, map[netip.Addr]string{ip: "h"}, now)
	misses := func(k int) {
		for sent := 0; sent < k; now = now.Add(10 * time.Millisecond) {
			sent += len(s.Due(now))
			s.Finish(now, macsOf)
		}
		for c := s.ips[ip]; !c.sent.IsZero(); now = now.Add(10 * time.Millisecond) {
			s.Finish(now, macsOf)
		}
	}
	misses(DefaultPace.Tries - 1)
	for s.Due(now) == nil {
		now = now.Add(10 * time.Millisecond)
	}
	s.Lost(now)
	assert.Assert(t, s.ips[ip].sent.IsZero(), "the check out was kept")
	misses(DefaultPace.Tries - 1)
	e, _ := s.Verdict(ip)
	assert.Equal(t, e.Verdict, Unchecked, "misses before the loss counted")
	misses(1)
	e, _ = s.Verdict(ip)
	assert.Equal(t, e.Verdict, NoAnswer)
}

func TestScheduleNewHolderStartsOver(t *testing.T) {
	s := NewSchedule(DefaultPace, 6)
	now := t0
	ip := netip.MustParseAddr("198.18.0.13")
	set(s, map[netip.Addr]string{ip: "h"}, now)
	run(s, wire{ip: {strangerMAC}}, &now, time.Second, 10*time.Millisecond)
	e, _ := s.Verdict(ip)
	assert.Equal(t, e.Verdict, Stranger)
	set(s, map[netip.Addr]string{ip: "other"}, now)
	e, _ = s.Verdict(ip)
	assert.Equal(t, e.Verdict, Unchecked)
	set(s, nil, now)
	_, ok := s.Verdict(ip)
	assert.Assert(t, !ok)
	_, ok = s.Next()
	assert.Assert(t, !ok)
}

func TestScheduleDeaf(t *testing.T) {
	s := NewSchedule(DefaultPace, 7)
	now := t0
	all := ips(5)
	set(s, all, now)
	assert.Assert(t, s.Heard(now))
	run(s, wire{}, &now, DefaultPace.Deaf-time.Second, 10*time.Millisecond)
	assert.Assert(t, s.Heard(now), "not deaf before Deaf has passed")
	run(s, wire{}, &now, 2*time.Second, 10*time.Millisecond)
	assert.Assert(t, !s.Heard(now))
	r := s.Report(now)
	assert.Equal(t, len(r.Entries), 5)
	assert.Assert(t, !r.Heard)
	w := wire{}
	for ip := range all {
		w[ip] = []string{holderMAC}
	}
	run(s, w, &now, 6*time.Second, 10*time.Millisecond)
	assert.DeepEqual(t, s.Report(now), Report{Heard: true})
	checked, ok := s.CheckedSince()
	assert.Assert(t, ok)
	assert.Assert(t, now.Sub(checked) <= DefaultPace.Every)
}
