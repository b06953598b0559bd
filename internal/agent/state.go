package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/config"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/netif"
	coordinationv1 "k8s.io/api/coordination/v1"
)

// managed is an IP that a Service names, and the name of its lock: a full
// pass reads every lock by name, and naming each IP anew allocated tens of
// thousands of strings a pass at 10,000 IPs.
type managed struct {
	ip   netip.Addr
	name string
}

// leaseCache is the Lease cache as the loop reads it: a lock by name,
// every lock, the heartbeats, how far the cache has come (lockBook.newPass)
// and the locks that changed since the last pass.
type leaseCache interface {
	lock(name string) *lease.Kept
	allLocks() []*lease.Kept
	heartbeats() []*coordinationv1.Lease
	leasesSeen() string
	takeLeaseChanges() (names map[string]bool, all bool, vouched []string)
}

// state is everything the owner loop knows. Only the loop touches it.
type state struct {
	a *Agent
	// The ports the loop itself uses, given when it is built.
	log     *slog.Logger
	clk     clock.WithTicker
	node    string // this node's name
	leases  leaseCache
	metrics Metrics

	desired desired
	// configs reads the configuration put in force in desired.
	configs *configSource
	// lastGood writes the configurations put in force for the next eipd
	// to start (nil without Options.LastGood).
	lastGood *lastGoodSaver
	self     self
	elig     eligibility
	book     lockBook
	writes   writeQueue
	sched    schedule
	binder   binder
	succ     successions
	routes   routing
	lan      lanState
	serving  serving
	ports    servedPorts

	live      *lease.Liveness
	hbLine    heartbeatLine
	hb        *heartbeater
	alloc     *allocator
	lifetime  *keeper
	watch     *watchdog
	conflicts addrConflicts
	wire      wireChecks
	// gone are the nodes out of service, whose IPs are free at once.
	gone goneNodes
	// reannouncer paces announce-interval's announcements.
	reannouncer reannouncer
	events      *eventPoster
}

func newState(a *Agent) *state {
	watch := newWatchdog(a.clk, a.opt.Hung)
	lifetime := newKeeper(a.log, a.clk, a.opt.Addresser, a.opt.Metrics.RefreshLate, watch.quiet)
	alloc := newAllocator(allocPorts{
		log: a.log, recorder: a.recorder, metrics: a.opt.Metrics, node: a.opt.Node, namespace: a.opt.Namespace,
		services: a.allServices, service: a.service,
	})
	events := &eventPoster{
		budget: newEventBudget(a.clk.Now()), recorder: a.recorder, service: a.service, nodes: a.nodes,
		node: a.opt.Node, clk: a.clk, log: a.log, metrics: a.opt.Metrics,
	}
	s := &state{
		a: a, log: a.log, clk: a.clk, node: a.opt.Node, leases: a, metrics: a.opt.Metrics,
		configs: &configSource{
			configMaps: a.configMap, namespace: a.opt.Namespace, name: a.opt.ConfigMap, lastGood: a.opt.LastGood,
			reserved: a.reservedAddresses, recorder: a.recorder, metrics: a.opt.Metrics, log: a.log,
		},
		ports: servedPorts{filter: a.opt.PortFilter, log: a.log},
		desired: desired{
			cfg:      config.Default(),
			entries:  map[netip.Addr]ipset.Entry{},
			names:    map[string]netip.Addr{},
			rejected: map[string]bool{},
		},
		self: self{needBarrier: true, liveUntil: map[string]time.Time{}, log: a.log, node: a.opt.Node, metrics: a.opt.Metrics},
		elig: eligibility{node: a.opt.Node, log: a.log, nodes: a.nodes, links: a.opt.Links, metrics: a.opt.Metrics,
			recorder: a.recorder, configMaps: a.configMap, configMap: a.opt.ConfigMap},
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
			metrics:     a.opt.Metrics,
			log:         a.log,
			events:      events,
			node:        a.opt.Node,
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
			devs:        a.opt.Devices,
			addresser:   a.opt.Addresser,
			announcer:   a.opt.Announcer,
			lifetime:    lifetime,
			watchClaims: a.opt.Claims,
			claims:      make(chan netif.Claim, 64),
		},
		succ:   newSuccessions(a.opt.Metrics, a.log),
		routes: routing{router: a.opt.Router, nodes: a.nodes, node: a.opt.Node, log: a.log, recorder: a.recorder, metrics: a.opt.Metrics},
		lan:    newLANState(a.opt.Node, a.clk, a.log, watch, nodeAddrs{a.nodes}, a.opt.ListenLAN),
		serving: newServing(servingPorts{
			open: a.watchSlices, lock: a.lock, service: a.service, nodes: nodeAddrs{a.nodes}, kubeProxy: a.opt.KubeProxy,
			node: a.opt.Node, clk: a.clk, log: a.log, events: events,
		}),
		reannouncer: reannouncer{announcer: a.opt.Announcer, log: a.log},
		hbLine:      newHeartbeatLine(),
		hb:          &heartbeater{a: a},
		alloc:       alloc,
		conflicts:   newAddrConflicts(a.opt.Node, a.opt.Announcer, a.opt.ProbeWait, a.clk, a.log, a.opt.Metrics, events),
		gone:        newGoneNodes(a.log, a.nodes),
		wire:        newWireChecks(a.opt.Node, a.opt.WirePace, a.opt.Announcer, a.heartbeats, a.log, a.opt.Metrics, events),
		events:      events,
		watch:       watch,
		lifetime:    lifetime,
	}
	return s
}

func (s *state) run(ctx context.Context, stop chan struct{}) error {
	s.serving.begin(ctx)
	go s.hb.run(s.hbLine.req, s.hbLine.res, stop)
	for range s.a.opt.Writers {
		go s.a.runWriter(s.writes.jobs, s.writes.results, stop)
		go s.a.runAllocWriter(s.alloc.jobs, s.alloc.results, stop)
	}
	if s.a.opt.LastGood != nil {
		s.lastGood = newLastGoodSaver(s.a.opt.LastGood, s.log)
		go s.lastGood.run(ctx, stop)
	}
	s.configs.load(&s.desired, s.lastGood, s.live)
	s.lifetime.configure(s.desired.cfg)
	go s.lifetime.run(stop)
	go s.watch.run(stop)
	s.live = lease.NewLiveness(s.node, s.desired.cfg.RenewInterval, 2*s.desired.cfg.RenewInterval)
	s.configureLAN()
	s.lan.start(stop)
	ticker := s.clk.NewTicker(s.desired.cfg.RenewInterval)
	interval := s.desired.cfg.RenewInterval
	timer := s.clk.NewTimer(time.Hour)
	in := s.newInputs(ctx, ticker.C(), timer.C())
	s.serving.warm(ctx, s.a.allServices(), s.clk.Now())
	s.reconcile()
	s.resync(true)
	s.requestRenew(s.renewal(s.clk.Now()))
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
		s.watch.progressed(s.clk.Now())
		if pass {
			in.drainInto(s.handle)
			s.pass()
		}
		if s.desired.cfg.RenewInterval != interval {
			ticker.Stop()
			interval = s.desired.cfg.RenewInterval
			ticker = s.clk.NewTicker(interval)
			in.setTick(ticker.C())
		}
		timer.Stop()
		if next := s.sched.nextWake(s.moment(s.clk.Now())); !next.IsZero() {
			timer.Reset(max(next.Sub(s.clk.Now()), time.Millisecond))
		}
	}
}
