package netif

import (
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeSender records sends; each IP counts as two packets, like a GARP.
// batches has the number of IPs of each call.
type fakeSender struct {
	sends   chan sent
	batches chan int
	err     error
	closed  chan struct{}
}

type sent struct {
	iface string
	ip    netip.Addr
}

func newFakeSender() *fakeSender {
	return &fakeSender{sends: make(chan sent, 256), batches: make(chan int, 256), closed: make(chan struct{})}
}

func (f *fakeSender) send(iface string, ips ...netip.Addr) (int, error) {
	for _, ip := range ips {
		f.sends <- sent{iface, ip}
	}
	f.batches <- len(ips)
	if f.err != nil {
		return 0, f.err
	}
	return 2 * len(ips), nil
}

func (f *fakeSender) probe(string, netip.Addr) error { return f.err }
func (f *fakeSender) ask(string, netip.Addr) error   { return f.err }

func (f *fakeSender) close() { close(f.closed) }

var _ sender = (*fakeSender)(nil)

type announcerHarness struct {
	t   *testing.T
	clk *clocktesting.FakeClock
	out *fakeSender
	a   *Announcer
	t0  time.Time
}

func newAnnouncerHarness(t *testing.T, repeats ...time.Duration) *announcerHarness {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &announcerHarness{t: t, clk: clocktesting.NewFakeClock(t0), out: newFakeSender(), t0: t0}
	h.a = newAnnouncer(slog.New(slog.DiscardHandler), h.clk, repeats, h.out)
	t.Cleanup(h.a.Close)
	return h
}

// next returns the next send, failing if none comes within a deadline.
func (h *announcerHarness) next() sent {
	h.t.Helper()
	select {
	case s := <-h.out.sends:
		return s
	case <-time.After(5 * time.Second):
		h.t.Fatal("no announcement sent")
		return sent{}
	}
}

func (h *announcerHarness) noneQueued() {
	h.t.Helper()
	select {
	case s := <-h.out.sends:
		h.t.Fatalf("unexpected announcement %+v", s)
	default:
	}
}

// advanceTo moves the clock to t0+d once the announcer is waiting on a timer.
func (h *announcerHarness) advanceTo(d time.Duration) {
	h.t.Helper()
	poll.WaitOn(h.t, func(poll.LogT) poll.Result {
		if h.clk.HasWaiters() {
			return poll.Success()
		}
		return poll.Continue("announcer not waiting on its timer")
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(time.Millisecond))
	h.clk.SetTime(h.t0.Add(d))
}

func TestAnnouncerRepeats(t *testing.T) {
	h := newAnnouncerHarness(t, 4*time.Second, 250*time.Millisecond, 2*time.Second, time.Second)
	ip := netip.MustParseAddr("198.18.0.5")

	assert.NilError(t, h.a.Announce("eth0", ip))
	assert.Equal(t, h.next(), sent{"eth0", ip})
	assert.Equal(t, h.a.Sent(), uint64(2))

	for i, at := range []time.Duration{250 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		h.advanceTo(at - time.Nanosecond)
		// The timer is set for exactly the due time, so a nanosecond early
		// it has not fired.
		assert.Assert(t, h.clk.HasWaiters(), "repeat %d fired early", i+1)
		h.clk.SetTime(h.t0.Add(at))
		assert.Equal(t, h.next(), sent{"eth0", ip})
	}
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if h.a.Sent() == 10 {
			return poll.Success()
		}
		return poll.Continue("sent %d packets", h.a.Sent())
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(time.Millisecond))
	// All repeats done: nothing left to wait for.
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if !h.clk.HasWaiters() {
			return poll.Success()
		}
		return poll.Continue("announcer still has a timer")
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(time.Millisecond))
}

func TestAnnouncerFirstSendIsSynchronous(t *testing.T) {
	h := newAnnouncerHarness(t, time.Second)
	ip := netip.MustParseAddr("2001:db8::5")
	assert.NilError(t, h.a.Announce("eth0", ip))
	select {
	case s := <-h.out.sends:
		assert.Equal(t, s, sent{"eth0", ip})
	default:
		t.Fatal("Announce returned before sending")
	}
}

// A stopped or re-announced address sends nothing from its old schedule. A
// marker announced a millisecond later falls due just after; the loop sends
// due repeats earliest first, so a stale repeat would come before it.
func TestAnnouncerStopAndReplace(t *testing.T) {
	h := newAnnouncerHarness(t, 250*time.Millisecond, time.Second)
	stopped := netip.MustParseAddr("198.18.0.5")
	replaced := netip.MustParseAddr("198.18.0.6")
	marker := netip.MustParseAddr("198.18.0.7")

	assert.NilError(t, h.a.Announce("eth0", stopped))
	assert.NilError(t, h.a.Announce("eth0", replaced))
	h.next()
	h.next()
	h.clk.SetTime(h.t0.Add(time.Millisecond))
	assert.NilError(t, h.a.Announce("eth0", marker))
	h.next()
	h.a.Stop(stopped)
	h.clk.SetTime(h.t0.Add(100 * time.Millisecond))
	assert.NilError(t, h.a.Announce("eth1", replaced)) // now due at 350ms, on eth1
	assert.Equal(t, h.next(), sent{"eth1", replaced})

	h.advanceTo(251 * time.Millisecond)
	assert.Equal(t, h.next(), sent{"eth0", marker})
	h.noneQueued()

	h.advanceTo(350 * time.Millisecond)
	assert.Equal(t, h.next(), sent{"eth1", replaced})
	h.noneQueued()
}

func TestAnnouncerFirstSendFails(t *testing.T) {
	h := newAnnouncerHarness(t, 250*time.Millisecond)
	h.out.err = errors.New("network is down")
	ip := netip.MustParseAddr("198.18.0.5")

	err := h.a.Announce("eth0", ip)
	assert.ErrorContains(t, err, "announce 198.18.0.5 on eth0: network is down")
	h.next()
	// The repeat is still tried: the link may be back by then.
	h.advanceTo(250 * time.Millisecond)
	assert.Equal(t, h.next(), sent{"eth0", ip})
	assert.Equal(t, h.a.Sent(), uint64(0))
}

func TestAnnouncerClose(t *testing.T) {
	h := newAnnouncerHarness(t, time.Second)
	assert.NilError(t, h.a.Announce("eth0", netip.MustParseAddr("198.18.0.5")))
	h.next()
	h.a.Close()
	h.a.Close()
	select {
	case <-h.out.closed:
	default:
		t.Fatal("sockets not closed")
	}
	err := h.a.Announce("eth0", netip.MustParseAddr("198.18.0.6"))
	assert.ErrorContains(t, err, "announcer closed")
	h.noneQueued()
}

func TestAnnouncerWithoutRepeats(t *testing.T) {
	h := newAnnouncerHarness(t)
	assert.NilError(t, h.a.Announce("eth0", netip.MustParseAddr("::ffff:198.18.0.5")))
	assert.Equal(t, h.next(), sent{"eth0", netip.MustParseAddr("198.18.0.5")}, "mapped address announced as IPv4")
	assert.ErrorContains(t, h.a.Announce("eth0", netip.Addr{}), "invalid address")
}

// Repeats that fall due together go out together: one call of the sender
// (one link lookup and one system call) for each interface, in the order
// they fell due, at most maxBatch at a time.
func TestAnnouncerBatchesDueRepeats(t *testing.T) {
	h := newAnnouncerHarness(t, 100*time.Millisecond)
	var eth0 []netip.Addr
	for i := range maxBatch + 6 {
		ip := netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})
		iface := "eth0"
		if i == 3 {
			iface = "eth1"
		} else {
			eth0 = append(eth0, ip)
		}
		assert.NilError(t, h.a.Announce(iface, ip))
		h.next()
		assert.Equal(t, <-h.out.batches, 1)
		h.clk.Step(time.Millisecond)
	}
	h.advanceTo(time.Second)
	var got []netip.Addr
	for range maxBatch + 6 {
		s := h.next()
		if s.iface == "eth0" {
			got = append(got, s.ip)
		}
	}
	assert.Assert(t, slices.Equal(got, eth0), "got %v", got)
	assert.DeepEqual(t, []int{<-h.out.batches, <-h.out.batches, <-h.out.batches}, []int{maxBatch - 1, 1, 6})
	h.noneQueued()
}

// Defend sends once, before it returns, and schedules no repeat: the clock
// can run past every repeat and nothing more goes out.
func TestAnnouncerDefendsOnce(t *testing.T) {
	h := newAnnouncerHarness(t, 250*time.Millisecond, time.Second)
	ip := netip.MustParseAddr("198.18.0.7")
	assert.NilError(t, h.a.Defend("eth0", ip))
	select {
	case s := <-h.out.sends:
		assert.Equal(t, s, sent{"eth0", ip})
	default:
		t.Fatal("Defend returned before sending")
	}
	assert.Equal(t, h.a.Sent(), uint64(2))
	h.clk.SetTime(h.t0.Add(time.Minute))
	h.noneQueued()
	assert.Assert(t, !h.clk.HasWaiters(), "a defence set a timer")
}

// Reannounce sends each address once, all in one batch, before it returns,
// and touches no pending repeat: an address announced just before still
// gets its repeats, and the re-announced ones get none.
func TestAnnouncerReannouncesOnceInOneBatch(t *testing.T) {
	h := newAnnouncerHarness(t, 250*time.Millisecond)
	fresh := netip.MustParseAddr("198.18.0.1")
	assert.NilError(t, h.a.Announce("eth0", fresh))
	assert.Equal(t, h.next(), sent{"eth0", fresh})
	assert.Equal(t, <-h.out.batches, 1)
	old := []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("::ffff:198.18.0.3")}
	assert.NilError(t, h.a.Reannounce("eth0", old...))
	assert.Equal(t, <-h.out.batches, 2)
	assert.Equal(t, h.next(), sent{"eth0", old[0]})
	assert.Equal(t, h.next(), sent{"eth0", netip.MustParseAddr("198.18.0.3")}, "IPv4-mapped addresses go out as IPv4")
	h.advanceTo(250 * time.Millisecond)
	assert.Equal(t, h.next(), sent{"eth0", fresh}, "the fresh address's repeat")
	h.clk.SetTime(h.t0.Add(time.Minute))
	h.noneQueued()

	h.a.Close()
	assert.ErrorContains(t, h.a.Reannounce("eth0", old[0]), "announce 1 addresses again on eth0 (198.18.0.2 first): announcer closed")
}
