package wire

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"
)

// Pace is how often, and how fast, a node checks the IPs it verifies.
type Pace struct {
	// Every: each IP is checked at least this often while the rate allows,
	// at a jittered time within the last quarter of it, so that checks of
	// IPs taken at once spread out.
	Every time.Duration
	// Rate bounds the checks this node sends a second. With more IPs than
	// Every × Rate, each is checked every IPs ÷ Rate instead.
	Rate float64
	// Wait is how long after a question its answers are waited for
	// before the check is judged.
	Wait time.Duration
	// Late: a check with no answer that is judged more than Late after
	// its wait ended proves nothing and is dropped, to be asked again.
	// The checker was not running when it should have been (a CPU quota
	// spent, a pause), so answers may still wait unread in its socket;
	// silence it did not listen for is no verdict on the holder. Zero
	// judges every check however late.
	Late time.Duration
	// Recheck is how soon an IP is checked again after a check that
	// found it other than answered by its holder, until the verdict
	// settles either way.
	Recheck time.Duration
	// Tries is how many checks in a row must go unanswered before the
	// verdict is NoAnswer: one lost frame is no verdict.
	Tries int
	// Deaf is how long without any answer to any of its checks makes a
	// node's NoAnswer verdicts unfit for repair: it cannot tell its own
	// deafness from the holders' silence.
	Deaf time.Duration
}

// DefaultPace checks every IP every 4 s, at most 100 a second per node: a
// stranger is reported within 5 s, and at 10,000 IPs on three nodes each
// node verifies about 3,300, every 33 s.
var DefaultPace = Pace{Every: 4 * time.Second, Rate: 100, Wait: 200 * time.Millisecond, Recheck: 500 * time.Millisecond, Tries: 3, Deaf: time.Minute, Late: 300 * time.Millisecond}

// Schedule is one node's checks: which IPs it verifies, when each is due,
// the answers to the probes out, and the verdicts. It is not safe for
// concurrent use; its owner calls it with the time.
type Schedule struct {
	pace   Pace
	rng    *rand.Rand
	ips    map[netip.Addr]*check
	tokens float64
	filled time.Time // when tokens were last topped up
	heard  time.Time // when any check last had an answer
	start  time.Time // when the schedule first had an IP
}

type check struct {
	holder  string
	due     time.Time
	sent    time.Time // zero: no probe out
	answers []string
	misses  int // unanswered checks in a row
	checked time.Time
	entry   Entry // the verdict reported
}

// Entry is the verdict a node reports for one IP: since when (on the
// checking node's clock) and, unless NoAnswer, the MACs that answered.
type Entry struct {
	Verdict Verdict
	MACs    []string
	Since   time.Time
}

func (e Entry) equal(o Entry) bool {
	return e.Verdict == o.Verdict && slices.Equal(e.MACs, o.MACs)
}

// NewSchedule returns an empty schedule; seed varies the jitter between
// nodes.
func NewSchedule(p Pace, seed uint64) *Schedule {
	return &Schedule{pace: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ips: map[netip.Addr]*check{}}
}

// Track makes ip, held by holder, one this node verifies. A new IP, or
// one with a new holder, is checked within a Recheck, spread over it; what
// was known of the old holder is dropped.
func (s *Schedule) Track(ip netip.Addr, holder string, now time.Time) {
	if c, ok := s.ips[ip]; ok && c.holder == holder {
		return
	}
	s.ips[ip] = &check{holder: holder, due: now.Add(s.jitter(s.pace.Recheck))}
	if s.start.IsZero() {
		s.start = now
	}
}

// Untrack stops verifying ip.
func (s *Schedule) Untrack(ip netip.Addr) { delete(s.ips, ip) }

// Tracks says whether this node verifies ip.
func (s *Schedule) Tracks(ip netip.Addr) bool {
	_, ok := s.ips[ip]
	return ok
}

// CheckAll makes every IP due now (kubectl eip check), still at Rate.
func (s *Schedule) CheckAll(now time.Time) {
	for _, c := range s.ips {
		if c.sent.IsZero() {
			c.due = now
		}
	}
}

func (s *Schedule) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(s.rng.Int64N(int64(d)))
}

// Due returns the IPs to probe now, earliest due first, as many as the
// rate allows, and marks their probes out.
func (s *Schedule) Due(now time.Time) []netip.Addr {
	s.fill(now)
	var due []netip.Addr
	for ip, c := range s.ips {
		if c.sent.IsZero() && !c.due.After(now) {
			due = append(due, ip)
		}
	}
	slices.SortFunc(due, func(a, b netip.Addr) int {
		if c := s.ips[a].due.Compare(s.ips[b].due); c != 0 {
			return c
		}
		return a.Compare(b)
	})
	// A token short by a rounding error is a token: Next promised one.
	due = due[:min(len(due), int(s.tokens+1e-6))]
	s.tokens -= float64(len(due))
	for _, ip := range due {
		c := s.ips[ip]
		c.sent, c.answers = now, c.answers[:0]
	}
	return due
}

// Unsent takes back the check of ip that Due marked out but that could not
// be sent: it is no answer and no miss, and is due again after Recheck.
func (s *Schedule) Unsent(ip netip.Addr, now time.Time) {
	if c, ok := s.ips[ip]; ok && !c.sent.IsZero() {
		s.void(c, now)
	}
}

// Lost says answers to this node's checks may have been lost before it
// read them (its socket overflowed): the checks out without an answer are
// asked again, and the misses counted towards NoAnswer start over. Silence
// the checker may not have heard is no evidence against a holder.
func (s *Schedule) Lost(now time.Time) {
	for _, c := range s.ips {
		if !c.sent.IsZero() && len(c.answers) == 0 {
			s.void(c, now)
		}
		c.misses = 0
	}
}

// void drops c's check as if never sent.
func (s *Schedule) void(c *check, now time.Time) {
	c.sent, c.answers, c.due = time.Time{}, c.answers[:0], now.Add(max(s.pace.Recheck, s.pace.Wait))
}

// fill adds the tokens earned since the last fill, up to a second's worth.
func (s *Schedule) fill(now time.Time) {
	if s.filled.IsZero() {
		s.tokens = max(1, s.pace.Rate)
	} else if now.After(s.filled) {
		s.tokens = min(max(1, s.pace.Rate), s.tokens+s.pace.Rate*now.Sub(s.filled).Seconds())
	}
	s.filled = now
}

// Answer records that mac answered for ip at now; it counts while a check
// of ip is out, however long after the question it is read: a busy
// checker reads its answers late, and the holder did answer.
func (s *Schedule) Answer(ip netip.Addr, mac string, now time.Time) {
	c, ok := s.ips[ip]
	if !ok || c.sent.IsZero() {
		return
	}
	s.heard = now
	if !slices.Contains(c.answers, mac) {
		c.answers = append(c.answers, mac)
	}
}

// Finish judges the checks whose wait has passed, macs giving each
// holder's MACs, and returns the IPs whose reported verdict changed.
func (s *Schedule) Finish(now time.Time, macs func(node string) []string) []netip.Addr {
	var changed []netip.Addr
	for ip, c := range s.ips {
		if c.sent.IsZero() || now.Sub(c.sent) < s.pace.Wait {
			continue
		}
		if len(c.answers) == 0 && s.pace.Late > 0 && now.Sub(c.sent) > s.pace.Wait+s.pace.Late {
			s.void(c, now)
			continue
		}
		v := Judge(macs(c.holder), c.answers)
		sent := c.sent
		c.sent, c.checked = time.Time{}, now
		next := Entry{Verdict: v, Since: now}
		if v != NoAnswer {
			next.MACs = slices.Sorted(slices.Values(c.answers))
			c.misses = 0
		} else if c.misses++; c.misses < s.pace.Tries {
			next = c.entry // not yet a verdict: check again soon
		}
		if !next.equal(c.entry) {
			c.entry = next
			changed = append(changed, ip)
		}
		// Timed from the probe, so that an IP is probed every Every.
		if c.entry.Verdict == Holder && c.misses == 0 {
			c.due = sent.Add(s.pace.Every - s.jitter(s.pace.Every/4))
		} else {
			c.due = sent.Add(max(s.pace.Recheck, s.pace.Wait))
		}
	}
	slices.SortFunc(changed, netip.Addr.Compare)
	return changed
}

// Next is when the schedule next has work: a probe due, once the rate
// allows one, or a wait over. ok is false when it verifies no IP.
func (s *Schedule) Next() (at time.Time, ok bool) {
	// A probe due waits for the rate: a node whose IPs outnumber what it
	// may check in Every would otherwise be woken for nothing until then.
	var ready time.Time
	if s.tokens < 1 && s.pace.Rate > 0 {
		ready = s.filled.Add(time.Duration(math.Ceil((1 - s.tokens) / s.pace.Rate * float64(time.Second))))
	}
	for _, c := range s.ips {
		t := c.due
		if !c.sent.IsZero() {
			t = c.sent.Add(s.pace.Wait)
		} else if t.Before(ready) {
			t = ready
		}
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// Verdict is the verdict reported for ip, and whether this node verifies
// it.
func (s *Schedule) Verdict(ip netip.Addr) (Entry, bool) {
	c, ok := s.ips[ip]
	if !ok {
		return Entry{}, false
	}
	return c.entry, true
}

// Counts is how many IPs this node verifies with each reported verdict.
func (s *Schedule) Counts() map[Verdict]int {
	out := map[Verdict]int{}
	for _, c := range s.ips {
		out[c.entry.Verdict]++
	}
	return out
}

// Report is what this node says in its heartbeat: the IPs not answered by
// their holder alone, and whether its NoAnswer verdicts may be acted on.
// It changes only when a verdict or deafness does.
func (s *Schedule) Report(now time.Time) Report {
	r := Report{Heard: s.Heard(now)}
	for ip, c := range s.ips {
		if v := c.entry.Verdict; v != Holder && v != Unchecked {
			if r.Entries == nil {
				r.Entries = map[netip.Addr]Entry{}
			}
			r.Entries[ip] = c.entry
		}
	}
	return r
}

// Heard: this node had an answer to one of its checks within Deaf, or
// has not been checking that long.
func (s *Schedule) Heard(now time.Time) bool {
	if s.start.IsZero() {
		return true
	}
	last := s.heard
	if last.Before(s.start) {
		last = s.start
	}
	return now.Sub(last) < s.pace.Deaf
}

// CheckedSince is the oldest of the last checks of the IPs verified: each
// was checked at or after it. ok is false while any has not been checked.
func (s *Schedule) CheckedSince() (t time.Time, ok bool) {
	for _, c := range s.ips {
		if c.checked.IsZero() {
			return time.Time{}, false
		}
		if t.IsZero() || c.checked.Before(t) {
			t = c.checked
		}
	}
	return t, !t.IsZero()
}
