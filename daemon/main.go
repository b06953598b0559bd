// Command eipd is eip's node daemon: it races for one Lease per external
// IP, binds what it holds on this node's interface, announces it, and hands
// it over when it must. All logic lives in internal/agent; this file only
// parses flags, wires the parts and handles signals.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/eip-project/eip/internal/agent"
	"github.com/eip-project/eip/internal/bgp"
	"github.com/eip-project/eip/internal/buildinfo"
	"github.com/eip-project/eip/internal/endpoints"
	"github.com/eip-project/eip/internal/kubeclient"
	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/internal/metrics"
	"github.com/eip-project/eip/internal/netif"
	"github.com/eip-project/eip/internal/wire"
)

// version and commit are stamped by the Makefile (-X): the VERSION file
// and the commit built.
var (
	version = "dev"
	commit  = "unknown"
)

type options struct {
	kubeconfig  string
	node        string
	namespace   string
	configMap   string
	metricsAddr string
	nodeIP      netip.Addr
	pprof       bool
	verbosity   int
	qps         float64
	burst       int
	showVersion bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("eipd", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty means in-cluster configuration")
	fs.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "name of this node's Node object (default $NODE_NAME)")
	fs.StringVar(&o.namespace, "namespace", envOr("POD_NAMESPACE", "eip-system"), "namespace of eip's Leases and ConfigMap (default $POD_NAMESPACE or eip-system)")
	fs.StringVar(&o.configMap, "config-map", "eip-config", "name of the ConfigMap holding eip's configuration (eipd's Role may read only eip-config: rename it there too)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":9402", "address serving /metrics, /healthz and /readyz, on --node-ip when it names no host; empty disables")
	nodeIP := fs.String("node-ip", os.Getenv("NODE_IP"), "this node's address, which the metrics and liveness ports bind; empty binds every address, the external IPs eipd binds included (default $NODE_IP)")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve /debug/pprof/ on --metrics-addr")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity: 0 info, 1 debug (per-IP decisions), 2 also client-go's own logs")
	fs.Float64Var(&o.qps, "kube-api-qps", 500, "queries per second allowed to the API server")
	fs.IntVar(&o.burst, "kube-api-burst", 1000, "burst of queries allowed to the API server")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.showVersion {
		return o, nil
	}
	var errs error
	if *nodeIP != "" {
		ip, err := netip.ParseAddr(*nodeIP)
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("flag --node-ip: %w", err))
		}
		o.nodeIP = ip.Unmap()
	}
	if host, port, err := net.SplitHostPort(o.metricsAddr); err == nil && host == "" && o.nodeIP.IsValid() {
		o.metricsAddr = net.JoinHostPort(o.nodeIP.String(), port)
	}
	if fs.NArg() > 0 {
		errs = errors.Join(errs, fmt.Errorf("unexpected arguments %q: eipd takes only flags", fs.Args()))
	}
	if o.node == "" {
		errs = errors.Join(errs, errors.New("flag --node-name: required (or set NODE_NAME)"))
	}
	if o.namespace == "" {
		errs = errors.Join(errs, errors.New("flag --namespace: must not be empty"))
	}
	if o.configMap == "" {
		errs = errors.Join(errs, errors.New("flag --config-map: must not be empty"))
	}
	if o.pprof && o.metricsAddr == "" {
		errs = errors.Join(errs, errors.New("flag --pprof: needs --metrics-addr"))
	}
	if o.verbosity < 0 {
		errs = errors.Join(errs, fmt.Errorf("flag -v: %d is negative", o.verbosity))
	}
	if o.qps <= 0 {
		errs = errors.Join(errs, fmt.Errorf("flag --kube-api-qps: %v must be positive", o.qps))
	}
	if o.burst <= 0 {
		errs = errors.Join(errs, fmt.Errorf("flag --kube-api-burst: %d must be positive", o.burst))
	}
	return o, errs
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "eipd:", err)
		os.Exit(2)
	}
	if o.showVersion {
		fmt.Println("eipd", buildinfo.Of(version, commit))
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "eipd:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	level := slog.LevelInfo
	if o.verbosity >= 1 {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if o.verbosity >= 2 {
		klog.SetSlogLogger(log.With("component", "client-go"))
	} else {
		klog.SetSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "client-go"))
	}
	build := buildinfo.Of(version, commit)
	log.Info("starting eipd", "version", build.String(), "node", o.node, "namespace", o.namespace, "configmap", o.configMap)

	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	// Protobuf: every type eipd reads and writes is built in, and each
	// watch event (a renewal of every node's heartbeat reaches every node)
	// costs the API server and eipd less to encode and decode than JSON.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.UserAgent = "eipd/" + version + " (" + o.node + ")"
	// No gzip: the API server compresses a watch that starts with a
	// streamed list (client-go's reflectors ask for one) for its whole
	// life, each event once per watcher, on the API server's CPU and
	// eipd's. A 10,000-IP cold start carries 10,000 lock events to every
	// eipd; the initial lists are what compression would save, once.
	cfg.DisableCompression = true
	client, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		return err
	}

	apiServer, err := apiServerAddrs(context.Background(), cfg.Host)
	if err != nil {
		log.Warn("cannot tell the API server's addresses; only the nodes' own are protected from binding", "err", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	watchCtx, cancelWatch := context.WithCancel(context.Background())
	defer cancelWatch()

	clk := clock.RealClock{}
	addrs := netif.NewAddresses(log)
	defer addrs.Close()
	// The device lives as long as this process: on any exit, SIGKILL
	// included, the kernel removes it with the addresses bound on it.
	tuns, err := netif.OpenTuns(log)
	if err != nil {
		return fmt.Errorf("%w (eipd needs /dev/net/tun: see docs/operating.md)", err)
	}
	defer func() { _ = tuns.Close() }()
	// The port filter goes with eipd when it stops; one left by a crash
	// is written anew by the next eipd's first pass.
	ports := netif.NewPortFilter()
	defer func() {
		if err := ports.Remove(); err != nil {
			log.Warn("remove the port filter", "err", err)
		}
	}()
	announcer := netif.NewAnnouncer(log, clk, []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second})
	defer announcer.Close()
	addrEvents := make(chan netif.AddrEvent, 256)
	linkEvents := make(chan netif.LinkEvent, 16)
	go func() {
		if err := netif.Watch(watchCtx, log, addrEvents, linkEvents); err != nil && watchCtx.Err() == nil {
			log.Error("netlink watch stopped", "err", err)
		}
	}()

	router := &bgp.Router{Speaker: bgp.New(log, nil), Filter: netif.ARPFilter{}, Passwords: bgp.SecretPasswords{Secrets: client.Secrets(o.namespace)}}
	// Deferred before the metrics server and Run: sessions close last,
	// after the shutdown handoff withdrew every route.
	defer router.Close()

	lanKeys, lanKeyErr := loadLivenessKeys(ctx, watchCtx, log, client, o.namespace, clk)
	lanDrops := &lanlive.Drops{}

	m, err := metrics.New(metrics.Options{Clock: clk, Announced: announcer.Sent, Version: version, LANDrops: lanDrops})
	if err != nil {
		return err
	}
	a, err := agent.New(agent.Options{
		Node: o.node, Namespace: o.namespace, ConfigMap: o.configMap, Build: build.String(),
		Client:    client,
		Leases:    lease.NewStore(client, o.namespace, m.LeaseWrite),
		Addresser: addrs, Links: addrs, Devices: tuns, Announcer: announcer, PortFilter: ports, Router: router,
		Hung: func(quiet time.Duration) {
			log.Error("the owner loop has made no progress; exiting so that this node's addresses go with eipd and peers take its IPs over", "since", quiet)
			os.Exit(3)
		},
		Claims: func(ctx context.Context, iface string, want func(netip.Addr) bool, out chan<- netif.Claim, backlog *netif.Backlog) error {
			return netif.WatchClaims(ctx, log, iface, want, out, backlog)
		},
		AddrEvents: addrEvents, LinkEvents: linkEvents, APIServer: apiServer, ProbeWait: probeWait, WirePace: wire.DefaultPace,
		KubeProxy: endpoints.NewKubeProxy(clk),
		LastGood:  agent.LastGoodConfigMap{ConfigMaps: client.ConfigMaps(o.namespace), Name: agent.LastGoodName(o.configMap)},
		ListenLAN: func(port uint16, sentBy lanlive.SentBy, out chan<- lanlive.Received) (agent.LANConn, error) {
			if lanKeyErr != nil {
				return nil, lanKeyErr
			}
			return lanlive.Listen(lanlive.Options{Addr: o.nodeIP, Port: port, Node: o.node, Keys: lanKeys, Drops: lanDrops, SentBy: sentBy, Clock: clk}, out)
		},
		Clock: clk, Log: log, Metrics: m,
	})
	if err != nil {
		return err
	}
	if o.metricsAddr != "" {
		// Serves until Run returns, so probes and scrapes keep working
		// during the shutdown handoff.
		srv, err := metrics.Start(o.metricsAddr, m.Handler(a.Ready(), o.pprof), log)
		if err != nil {
			return err
		}
		defer srv.Close()
		log.Info("serving metrics", "addr", srv.Addr().String(), "pprof", o.pprof)
	}
	return a.Run(ctx)
}

// loadLivenessKeys reads (or makes) the keys that sign liveness datagrams,
// trying for keyBudget: eipd has no use for a key before it reaches the API
// server anyway; then it watches them until watchCtx ends. Without keys,
// liveness over the LAN stays off on this node until it restarts, and its
// peers judge it from its heartbeat alone.
func loadLivenessKeys(ctx, watchCtx context.Context, log *slog.Logger, client kubeclient.Interface, namespace string, clk clock.Clock) (*lanlive.Keyring, error) {
	ctx, cancel := context.WithTimeout(ctx, keyBudget)
	defer cancel()
	for {
		keys, rv, err := lanlive.LoadKey(ctx, client, namespace)
		if err == nil {
			ring, err := lanlive.NewKeyring(keys.Sign, keys.Previous)
			if err != nil {
				return nil, err
			}
			go lanlive.KeyWatch{Client: client, Namespace: namespace, Ring: ring, Clock: clk, Log: log}.Run(watchCtx, keys, rv)
			return ring, nil
		}
		log.Warn("cannot read the liveness key yet", "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
}

// keyBudget bounds how long eipd tries to read the liveness key at start.
const keyBudget = 30 * time.Second

// probeWait is how long eipd listens for an answer to its probes before it
// binds an IP no eip node was serving: a LAN host answers an ARP probe in
// well under a millisecond; the rest is room for a loaded node.
const probeWait = 60 * time.Millisecond

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (pass --kubeconfig outside a cluster): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("flag --kubeconfig: %w", err)
	}
	return cfg, nil
}

// apiServerAddrs are the addresses of host, the API server URL eipd talks
// to: eip must never bind them (a node answering for the API server's
// address cuts every node off its control plane).
func apiServerAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	u, err := url.Parse(host)
	if err != nil || u.Hostname() == "" {
		// A bare host:port, as a kubeconfig may give it.
		u = &url.URL{Host: host}
	}
	name := u.Hostname()
	if ip, err := netip.ParseAddr(name); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, fmt.Errorf("resolve API server %q: %w", name, err)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}
