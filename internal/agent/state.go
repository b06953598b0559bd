package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// binding is an address this node has put on an interface.
type binding struct {
	iface    string // where it is announced and probed
	dev      string // where the address is: iface, or one of eipd's devices
	missing  bool   // removed by someone else and not restored yet
	prefix   netip.Prefix
	announce config.Announce
	route    bgp.Route // announced when announce.BGP()
}

// onDevice: the address is on one of eipd's devices, not on its interface.
func (b binding) onDevice() bool { return b.dev != b.iface }

// managed is an IP that a Service names, and the name of its lock: a full
// pass reads every lock by name, and naming each IP anew allocated tens of
// thousands of strings a pass at 10,000 IPs.
type managed struct {
	ip   netip.Addr
	name string
}

// state is everything the owner loop knows. Only the loop touches it.
type state struct {
	a   *Agent
	log *slog.Logger

	desired desired
	self    self
	book    lockBook
	writes  writeQueue
	sched   schedule
	binder  binder
	succ    successions
	routes  routing
	lan     lanState
	serving serving
	ports   servedPorts

	live      *lease.Liveness
	renewReq  chan renewal
	renewRes  chan renewResult
	hb        *heartbeater
	alloc     *allocator
	lifetime  *keeper
	watch     *watchdog
	conflicts addrConflicts
	wire      wireChecks
	events    *eventBudget
}

// self is what this node knows of its own standing: whether it may write,
// bind and hold (its renewals, the barrier after a break, a stalled loop,
// fencing), and whether it is eligible.
type self struct {
	lastRenewOK time.Time // when the last successful renewal was sent
	// lastRenewFor is the lease duration that renewal wrote.
	lastRenewFor time.Duration
	// lastRenewAsked is when the heartbeat writer last took a renewal,
	// lastAsked that renewal.
	lastRenewAsked time.Time
	lastAsked      renewal
	renewFailing   bool
	// renewFails counts the renewals that failed in a row, the last one
	// at renewFailedAt (see renewBackoff).
	renewFails    int
	renewFailedAt time.Time
	needBarrier   bool      // bind nothing new until a renewal sent after the break comes back
	barrier       time.Time // wall time of that renewal
	// lastTick is when the loop last ticked; stalled says that a tick came
	// late and the locks were not re-read since (loopLate), stallAt when.
	lastTick, stallAt time.Time
	stalled           bool
	fenced            bool
	shutting          bool
	selfEligible      bool
	selfReason        string
	// peersKnownAt: until then this node has not watched heartbeats for a
	// renew interval since it (re)connected, so it may not know every live
	// peer, nor its rank among them, and races for no IP.
	peersKnownAt time.Time
	// liveUntil is when this node last counted each node live
	// (lease.View.LiveUntil).
	liveUntil map[string]time.Time
	// unheard: a peer no longer hears this node over the LAN, since
	// unheardAt (lan.go).
	unheard   bool
	unheardAt time.Time

	log  *slog.Logger
	node string
}

// writeQueue is the lock writes in flight and the room for more: the
// window of acquisitions and the bound on IPs dark for a hand-off.
type writeQueue struct {
	jobs     chan write
	results  chan writeResult
	inflight map[string]bool
	pending  map[string]string // lock name -> the holder an ownership write in flight names
	// waiting are the acquisitions decided while they could not be sent.
	waiting   waitQueue
	acquiring int // Create and Acquire writes in flight, see dispatch
	dropping  int // writes in flight whose IP was unbound first, see drop
	// window is how many acquisitions may be in flight (congestion);
	// below one, one at a time, none before paceUntil. idleSince is when
	// the last acquisition in flight came back, or the last pause ended
	// (windowAt). sent numbers the acquisitions sent, and cut is the first
	// sent after the window was last narrowed.
	window               float64
	paceUntil, idleSince time.Time
	sent, cut            int
	// dropWaiting are the bound IPs whose hand-off or delete waits for
	// one of those (drop).
	dropWaiting map[netip.Addr]bool
	undropped   []netip.Addr // returned by done, its room kept
	writers     int          // Options.Writers
}

// schedule is when the loop passes, and over what: the inputs that ask
// for a full pass, the IPs to decide again, and the times it set.
type schedule struct {
	// dirtyEps: an EndpointSlice changed, which decides again only the IPs
	// of Local Services whose eligible nodes changed (updateServing).
	dirtySvc, dirtyNodes, dirtyCM, dirtyEps bool
	wake                                    time.Time
	lastResync                              time.Time
	// lastPass is when the last full pass ran and passVerdicts what it
	// read of each node; passWritable is whether this node could write at
	// the last pass, full or not (see passDue), and fullUnwritable whether
	// it could not at the last full one, which then allocated nothing and
	// collected no heartbeat.
	lastPass       time.Time
	passStart      time.Time // when the pass under way began (sliceOver)
	passWritable   bool
	fullUnwritable bool
	passVerdicts   map[string]verdict
	// writableDeps are the IPs whose last decision depends on whether
	// this node may write: a change of that decides only them again
	// (writableChanged).
	writableDeps map[netip.Addr]bool
	// needFull says an input since the last pass changed something every
	// IP reads; hbDirty that a heartbeat was renewed. dirty are the IPs
	// whose lock, write or address changed. ipWake holds each IP's own
	// decision time.
	needFull, hbDirty bool
	dirty             map[netip.Addr]bool
	dirtyOrder        []netip.Addr // dirty in address order, kept for its room
	ipWake            ipWakes
	// lateBinds are held IPs not bound because the loop was late; its
	// next tick on time decides them again.
	lateBinds map[netip.Addr]bool
	// first says, per IP of order, whether the last full pass decided it
	// among those that go first (reconcile); kept for the next one.
	first []bool
}

// binder is what this node has bound, and on which interface or device.
type binder struct {
	bound map[netip.Addr]binding
	// ownRemovals counts, per IP, the removals this node made whose
	// address events have not come back yet (see addrEvent).
	ownRemovals map[netip.Addr]int
	linkDown    map[string]bool
	claimWatch  map[string]context.CancelFunc
	claimed     *claimedSet
	autoIface   map[netip.Addr]string // "auto" resolved, see ifaceFor
	arpAnswers  map[string]bool       // per LAN interface, see placeOnDevice
	macs        string                // ownMACs; "" until listed, and after a link changed
	devices     addressDevices

	log         *slog.Logger
	links       Links
	watchClaims ClaimWatcher
	claims      chan netif.Claim // what the claim watches see
}

// routing is route mode's state (route.go).
type routing struct {
	routerErr   string // why the route-mode configuration was refused
	bgpSessions string // lease.FormatBGPSessions of the sessions, for the heartbeat
	sessions    map[netip.Addr]sessionSeen
	announced   int // routes announced

	router Router
	nodes  corelisters.NodeLister // for this node's router ID
	node   string
	log    *slog.Logger
}

// lanState is liveness over the LAN (lan.go): the socket and its port,
// and what arrives on it (read by the speaker, lanspeaker.go, which also
// sends). Whether a peer no longer hears this node is this node's
// standing (self.unheard).
type lanState struct {
	lanConn LANConn
	lanPort uint16
	lanIn   chan lanlive.Received
	speaker *speaker
	// slowUntil: until then the watch is judged at the pace of slow
	// heartbeats (setLANTimings).
	slowUntil time.Time
}

func newState(a *Agent) *state {
	s := &state{
		a: a, log: a.log,
		ports: servedPorts{filter: a.opt.PortFilter},
		desired: desired{
			cfg:      config.Default(),
			entries:  map[netip.Addr]ipset.Entry{},
			names:    map[string]netip.Addr{},
			rejected: map[string]bool{},
		},
		self: self{needBarrier: true, liveUntil: map[string]time.Time{}, log: a.log, node: a.opt.Node},
		book: newLockBook(a.log),
		writes: writeQueue{
			jobs:        make(chan write, 4096),
			results:     make(chan writeResult, 64),
			inflight:    map[string]bool{},
			pending:     map[string]string{},
			waiting:     newWaitQueue(),
			window:      min(slowStart, float64(a.opt.Writers)),
			writers:     a.opt.Writers,
			dropWaiting: map[netip.Addr]bool{},
		},
		sched: newSchedule(),
		binder: binder{
			bound:       map[netip.Addr]binding{},
			ownRemovals: map[netip.Addr]int{},
			linkDown:    map[string]bool{},
			claimWatch:  map[string]context.CancelFunc{},
			claimed:     newClaimedSet(),
			autoIface:   map[netip.Addr]string{},
			arpAnswers:  map[string]bool{},
			devices:     addressDevices{count: map[string]int{}},
			log:         a.log,
			links:       a.opt.Links,
			watchClaims: a.opt.Claims,
			claims:      make(chan netif.Claim, 64),
		},
		succ:      successions{succeeding: map[netip.Addr]succession{}, held: map[netip.Addr]bool{}},
		routes:    routing{router: a.opt.Router, nodes: a.nodes, node: a.opt.Node, log: a.log},
		lan:       lanState{lanIn: make(chan lanlive.Received, 256)},
		serving:   newServing(a.watchSlices),
		renewReq:  make(chan renewal, 1),
		renewRes:  make(chan renewResult, 1),
		hb:        &heartbeater{a: a},
		alloc:     newAllocator(),
		conflicts: newAddrConflicts(),
		wire:      newWireChecks(a.opt.Node, a.opt.WirePace),
		events:    newEventBudget(a.clk.Now()),
		watch:     newWatchdog(a.clk, a.opt.Hung),
	}
	s.lifetime = newKeeper(a.log, a.clk, a.opt.Addresser, a.opt.Metrics.RefreshLate, s.watch.quiet)
	s.lan.speaker = newSpeaker(a.opt.Node, a.clk, a.log, s.watch)
	return s
}

func (s *state) run(ctx context.Context, stop chan struct{}) error {
	s.serving.checkCtx = ctx
	go s.hb.run(s.renewReq, s.renewRes, stop)
	for range s.a.opt.Writers {
		go s.a.runWriter(s.writes.jobs, s.writes.results, stop)
	}
	s.startAllocator(stop)
	s.loadConfig()
	s.lifetime.configure(s.desired.cfg)
	go s.lifetime.run(stop)
	go s.watch.run(stop)
	s.live = lease.NewLiveness(s.a.opt.Node, s.desired.cfg.RenewInterval, 2*s.desired.cfg.RenewInterval)
	s.configureLAN()
	go s.lan.speaker.run(s.lan.lanIn, stop)
	ticker := s.a.clk.NewTicker(s.desired.cfg.RenewInterval)
	interval := s.desired.cfg.RenewInterval
	timer := s.a.clk.NewTimer(time.Hour)
	in := s.newInputs(ctx, ticker.C(), timer.C())
	s.warmSlices(ctx)
	s.reconcile()
	s.resync(true)
	s.requestRenew()
	close(s.a.readyCh)
	for {
		i, v := in.wait()
		if i == inDone {
			ticker.Stop()
			timer.Stop()
			s.watch.disarm()
			return s.shutdown()
		}
		pass := s.handle(i, v, false)
		s.watch.progressed(s.a.clk.Now())
		if pass {
			s.drain(in)
			s.pass()
		}
		if s.desired.cfg.RenewInterval != interval {
			ticker.Stop()
			interval = s.desired.cfg.RenewInterval
			ticker = s.a.clk.NewTicker(interval)
			in.setTick(ticker.C())
		}
		timer.Stop()
		if next := s.nextWake(s.a.clk.Now()); !next.IsZero() {
			timer.Reset(max(next.Sub(s.a.clk.Now()), time.Millisecond))
		}
	}
}

// drainLimit bounds the inputs one reconcile pass answers, so that a flood
// cannot hold the pass (and the heartbeat it requests) back for long.
const drainLimit = 1024

// drain handles the inputs that are already waiting, without blocking, so
// that one reconcile pass answers a burst of them: a thousand lock writes
// coming back at a cold start, a lease event per write, an address event
// per binding. A pass costs the same for one input as for a thousand.
func (s *state) drain(in *inputs) {
	for range drainLimit {
		i, v, ok := in.waiting()
		if !ok {
			return
		}
		s.handle(i, v, true)
	}
}
