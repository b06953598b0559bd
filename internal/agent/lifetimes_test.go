package agent

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/netif"
)

// refreshRecorder is an Addresser that records Refresh calls; the keeper
// uses nothing else.
type refreshRecorder struct {
	Addresser
	mu    sync.Mutex
	calls [][]netif.Bound
	life  []time.Duration
}

func (r *refreshRecorder) Refresh(addrs []netif.Bound, lifetime time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, addrs)
	r.life = append(r.life, lifetime)
	return nil
}

func (r *refreshRecorder) refreshed() ([][]netif.Bound, []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.life
}

type keeperHarness struct {
	t   *testing.T
	clk *clocktesting.FakeClock
	rec *refreshRecorder
	k   *keeper
	// watch is the loop's progress, as the keeper sees it.
	watch *watchdog
	late  atomic.Int32
}

func startKeeper(t *testing.T, c config.Config) *keeperHarness {
	h := &keeperHarness{t: t, clk: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), rec: &refreshRecorder{}}
	h.watch = newWatchdog(h.clk, func(time.Duration) {})
	h.k = newKeeper(slog.New(slog.DiscardHandler), h.clk, h.rec, func() { h.late.Add(1) }, h.watch.quiet)
	h.k.configure(c)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { h.k.run(stop); close(done) }()
	t.Cleanup(func() { close(stop); <-done })
	return h
}

// tick is a tick of the owner loop: progress, and a refresh now.
func (h *keeperHarness) tick() {
	h.watch.progressed(h.clk.Now())
	h.k.loopTicked()
}

// step moves the clock once the keeper waits on its timer.
func (h *keeperHarness) step(d time.Duration) {
	h.idle()
	h.clk.Step(d)
}

// idle waits until the keeper waits on its timer: it has handled
// everything before.
func (h *keeperHarness) idle() {
	poll.WaitOn(h.t, func(poll.LogT) poll.Result {
		if h.clk.HasWaiters() {
			return poll.Success()
		}
		return poll.Continue("keeper is not waiting")
	})
}

// calls waits until the keeper has made n Refresh calls, and returns them.
func (h *keeperHarness) calls(n int) ([][]netif.Bound, []time.Duration) {
	var calls [][]netif.Bound
	var life []time.Duration
	poll.WaitOn(h.t, func(poll.LogT) poll.Result {
		if calls, life = h.rec.refreshed(); len(calls) >= n {
			return poll.Success()
		}
		return poll.Continue("%d refresh calls", len(calls))
	})
	return calls, life
}

func keptIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }

// The keeper refreshes every kept address at each tick of the loop, a
// chunk per call, and never one it was told to forget.
func TestKeeperRefreshesOnTicks(t *testing.T) {
	h := startKeeper(t, config.Default())
	for i := range lifetimeChunk + 10 {
		h.k.keep(keptIP(i), netif.Bound{Iface: "eth0", Prefix: netip.PrefixFrom(keptIP(i), 32)})
	}
	h.k.forget(keptIP(3))
	h.tick()
	calls, life := h.calls(2)
	assert.Equal(t, len(calls[0]), lifetimeChunk)
	assert.Equal(t, len(calls[0])+len(calls[1]), lifetimeChunk+9)
	for _, c := range calls {
		for _, b := range c {
			assert.Assert(t, b.Prefix.Addr() != keptIP(3), "refreshed a forgotten address")
		}
	}
	assert.Equal(t, life[0], config.Default().AddressLifetime())
}

// Between ticks the keeper refreshes each renew interval while the loop
// makes progress, however late its ticks come (a starved loop keeps its
// addresses, as on eipd's device), and stops once the loop has made none
// for loopHungAfter: hung, it loses them a lifetime later. A refresh more
// than 1.5 intervals after the previous one counts as late. The 1 s lease
// is no different.
func TestKeeperRefreshesWhileTheLoopIsNotHung(t *testing.T) {
	for _, lease := range []time.Duration{2 * time.Second, time.Second} {
		t.Run(lease.String(), func(t *testing.T) {
			c := config.Default()
			c.LeaseDuration, c.RenewInterval = lease, lease/4
			h := startKeeper(t, c)
			h.k.keep(keptIP(1), netif.Bound{Iface: "eth0", Prefix: netip.MustParsePrefix("198.18.0.1/32")})
			h.tick()
			h.calls(1)
			steps := int(loopHungAfter / c.RenewInterval)
			for range steps - 1 { // no tick, but the loop is not hung yet
				h.step(c.RenewInterval)
			}
			h.calls(steps)
			h.step(c.RenewInterval) // loopHungAfter without progress: hung
			h.step(c.RenewInterval)
			h.idle()
			calls, _ := h.rec.refreshed()
			assert.Equal(t, len(calls), steps)
			assert.Equal(t, h.late.Load(), int32(0))
			h.tick() // the loop is back, two intervals after the last refresh
			h.calls(steps + 1)
			h.idle()
			assert.Equal(t, h.late.Load(), int32(1))
		})
	}
}

// With nothing to refresh (every address on eipd's device) a late tick is
// no late refresh.
func TestKeeperWithNothingToRefreshIsNeverLate(t *testing.T) {
	c := config.Default()
	h := startKeeper(t, c)
	h.tick()
	h.step(3 * c.RenewInterval)
	h.tick()
	h.idle()
	h.k.keep(keptIP(1), netif.Bound{Iface: "eth0", Prefix: netip.MustParsePrefix("198.18.0.1/32")})
	h.step(c.RenewInterval)
	h.tick()
	h.calls(1)
	h.idle()
	assert.Equal(t, h.late.Load(), int32(0))
}
