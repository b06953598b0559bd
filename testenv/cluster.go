package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/eip-project/eip/testenv/realnode"
)

// Options configure a cluster. The zero value is a usable default.
type Options struct {
	// Nodes is the number of node namespaces (default 3, at most 89).
	Nodes int
	// ServiceIPs is how many Service IPs the client will reach at most.
	// With the nodes, it sizes the machine's neighbour tables, which all
	// namespaces share: when the cluster may need more entries than
	// gc_thresh3 allows, Start raises the thresholds and Close restores
	// them (not with Detach). See NeighTable.
	ServiceIPs int
	// Dir is the run directory for certificates, kubeconfigs, etcd data and
	// logs. Default: a new directory under os.TempDir(), removed by Close
	// unless KeepDir is set or EIP_TESTENV_KEEP=1.
	Dir     string
	KeepDir bool
	// K8sBinDir holds etcd, kube-apiserver and kubectl. Default: $EIP_K8S_BIN,
	// else the directory scripts/build-k8s.sh builds into.
	K8sBinDir string
	// EipdBin is the daemon binary. Default: $EIPD_BIN, else bin/eipd in the
	// repository root. It is only needed by StartDaemon.
	EipdBin string
	// ManifestsDir is the repository's manifests/ (default found from the
	// working directory), and Manifests the files in it applied at start
	// (default namespace.yaml, serviceaccount.yaml, rbac.yaml,
	// liveness-key.yaml).
	ManifestsDir string
	Manifests    []string
	// Detach leaves the control plane and daemons running when the process
	// that started them exits (for `testenv up`); tear down with Teardown.
	Detach bool
	// RealNodes makes every node a real Kubernetes node (package realnode):
	// containerd, a kubelet and kube-proxy in each node namespace, with pod
	// networking, and kube-controller-manager and kube-scheduler in the
	// control plane, instead of the Node objects testenv registers itself.
	// The kubelets use the admin kubeconfig; no per-node eip kubeconfig is
	// written (eipd runs as a DaemonSet pod, see StartDaemon otherwise).
	RealNodes bool
	// RealNodeBins are the real nodes' binaries. Default: where
	// scripts/build-tool.sh builds the tools kubelet, containerd and cni.
	RealNodeBins realnode.Bins
	// GracefulShutdown, with RealNodes, turns on the kubelet's graceful
	// node shutdown on every node (Cluster.ShutdownNode).
	GracefulShutdown *realnode.GracefulShutdown
	// Images are imported into every real node's containerd at start,
	// besides realnode.WebImage (and the pause image).
	Images []realnode.Image
	// Registry starts a container registry (Cluster.Registry) that the
	// real nodes pull from, also as the mirror of every registry that
	// Options.Mirrored names (ghcr.io: eip's own images).
	Registry bool
	Mirrored []string
	// StartTimeout bounds each wait for a process to become ready
	// (default 90 s).
	StartTimeout time.Duration
	// Logger receives progress; default discards it.
	Logger *slog.Logger
	// Profiling serves kube-apiserver's /debug/pprof (its --profiling),
	// for the benchmark's profiles of the API server.
	Profiling bool
	// Router adds a BGP router running BIRD 2 and a routed client behind
	// it (see Router).
	Router bool
}

const (
	// Namespace is the Kubernetes namespace eipd runs in.
	Namespace = "eip-system"
	// ServiceAccount is the account eipd authenticates as.
	ServiceAccount = "eip"
	// ConfigMap is the name of eipd's configuration.
	ConfigMap = "eip-config"
)

func (o *Options) setDefaults() {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 90 * time.Second
	}
	if o.Manifests == nil {
		o.Manifests = []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "liveness-key.yaml", "last-good.yaml"}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if os.Getenv("EIP_TESTENV_KEEP") == "1" {
		o.KeepDir = true
	}
}

// Cluster is a running control plane and its LAN of node namespaces. Its
// methods are safe for concurrent use.
type Cluster struct {
	opts  Options
	id    string
	dir   string
	log   *slog.Logger
	lan   *namespace
	cp    *endpoint
	cl    *endpoint
	nodes []*endpoint
	rt    *endpoint  // the router, with Options.Router
	rcl   *namespace // the routed client, with Options.Router
	pki   *pki

	admin  *rest.Config
	client kubernetes.Interface

	mu        sync.Mutex
	etcd      *process
	apiserver *process
	bird      *process
	daemons   map[string]*process
	probes    map[*Probe]struct{}
	delays    map[string]*delayLine
	keep      bool
	closed    bool
	watchdog  *watchdog
	// imageRegistry runs with Options.Registry.
	imageRegistry *imageRegistry

	realNodes   map[string]*realnode.Node
	controllers *realnode.Controllers

	neighNeed    int
	neighChanges []neighChange

	closeOnce sync.Once
	closeErr  error
}

// Start creates the namespaces, the PKI, etcd and kube-apiserver, applies
// the manifests, registers a Node object per node namespace and writes a
// kubeconfig per node for the ServiceAccount eip. On error everything it
// created is removed again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts.setDefaults()
	if opts.Nodes < 1 || opts.Nodes > maxNodes {
		return nil, fmt.Errorf("start cluster: %d nodes, want 1 to %d", opts.Nodes, maxNodes)
	}
	if err := Prerequisites(opts); err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	if err := opts.resolveBins(); err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	id, err := newRunID()
	if err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		dir, err = os.MkdirTemp("", "eip-testenv-"+id+"-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("start cluster: %w", err)
	}
	c := &Cluster{
		opts:    opts,
		id:      id,
		dir:     dir,
		log:     opts.Logger.With("run", id),
		daemons: map[string]*process{},
		probes:  map[*Probe]struct{}{},
		delays:  map[string]*delayLine{},
		keep:    opts.KeepDir,

		realNodes: map[string]*realnode.Node{},
	}
	if swept, err := Sweep(); err != nil {
		c.log.Warn("sweep stale clusters", "err", err)
	} else if len(swept) > 0 {
		c.log.Info("swept stale clusters", "ids", swept)
	}
	if err := c.writeState(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if !opts.Detach {
		if c.watchdog, err = startWatchdog(c.dir, c.StatePath(), c.plannedNamespaces()); err != nil {
			return nil, errors.Join(err, os.Remove(c.StatePath()), os.RemoveAll(dir))
		}
	}
	if !opts.Detach {
		endpoints := opts.Nodes + 2 // the control plane and the client
		if opts.Router {
			endpoints++
		}
		c.neighNeed = NeighEntries(endpoints, opts.ServiceIPs)
		if c.neighChanges, err = raiseNeighLimits(c.neighNeed); err != nil {
			return nil, errors.Join(fmt.Errorf("start cluster: %w", err), c.Close())
		}
		if len(c.neighChanges) > 0 {
			c.log.Warn("the host's neighbour tables are shared by all namespaces", "changed", c.NeighTable())
		}
	}
	if err := c.start(ctx); err != nil {
		err = fmt.Errorf("start cluster %s (run dir %s): %w", id, dir, err)
		c.keep = true // the logs explain the failure
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

func newRunID() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("run id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func (c *Cluster) nsName(suffix string) string { return "eip-" + c.id + "-" + suffix }

func (c *Cluster) start(ctx context.Context) error {
	began := time.Now()
	if err := c.buildLAN(ctx); err != nil {
		return err
	}
	c.log.Info("lan ready", "nodes", len(c.nodes), "took", time.Since(began))

	p, err := newPKI(filepath.Join(c.dir, "pki"),
		[]net.IP{c.cp.ipv4.AsSlice(), c.cp.ipv6.AsSlice(), net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return err
	}
	c.pki = p
	c.admin = c.restConfig(rest.TLSClientConfig{CAData: p.caPEM, CertData: p.adminCertPEM, KeyData: p.adminKeyPEM}, "")
	if c.client, err = kubernetes.NewForConfig(c.admin); err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if err := writeKubeconfig(c.AdminKubeconfig(), c.server(), p.caPEM, kubeconfigUser{certPEM: p.adminCertPEM, keyPEM: p.adminKeyPEM}); err != nil {
		return err
	}

	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	c.log.Info("etcd ready", "took", time.Since(began))
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}
	c.log.Info("kube-apiserver ready", "took", time.Since(began))

	var files []string
	for _, f := range c.opts.Manifests {
		files = append(files, filepath.Join(c.opts.ManifestsDir, f))
	}
	if err := c.ApplyFiles(ctx, files...); err != nil {
		return err
	}
	if c.opts.Registry {
		if err := c.startImageRegistry(); err != nil {
			return err
		}
	}
	if c.opts.RealNodes {
		if err := c.startRealNodes(ctx); err != nil {
			return err
		}
		c.log.Info("cluster ready", "dir", c.dir, "took", time.Since(began))
		return c.writeState()
	}
	for _, n := range c.nodes {
		if err := c.registerNode(ctx, n); err != nil {
			return err
		}
		if err := c.writeNodeKubeconfig(ctx, n); err != nil {
			return err
		}
	}
	c.log.Info("cluster ready", "dir", c.dir, "took", time.Since(began))
	return c.writeState() // again, with the nodes
}

func (c *Cluster) buildLAN(ctx context.Context) error {
	var err error
	if c.lan, err = createNamespace(ctx, c.nsName("lan")); err != nil {
		return err
	}
	if err := createBridge(ctx, c.lan); err != nil {
		return err
	}
	newEndpoint := func(name, port string, n int) (*endpoint, error) {
		ns, err := createNamespace(ctx, c.nsName(port))
		if err != nil {
			return nil, err
		}
		v4, v6, mac := host(n)
		e := &endpoint{name: name, ns: ns, port: port, ipv4: v4, ipv6: v6, mac: mac}
		c.mu.Lock()
		if name != ControlPlane && name != Client {
			c.nodes = append(c.nodes, e)
		}
		c.mu.Unlock()
		return e, attach(ctx, c.lan, e)
	}
	if c.cp, err = newEndpoint(ControlPlane, "cp", 1); err != nil {
		return err
	}
	if c.cl, err = newEndpoint(Client, "client", 2); err != nil {
		return err
	}
	for i := 1; i <= c.opts.Nodes; i++ {
		if _, err := newEndpoint("node-"+strconv.Itoa(i), "n"+strconv.Itoa(i), 10+i); err != nil {
			return err
		}
	}
	if c.opts.Router {
		return c.buildRouter(ctx)
	}
	return nil
}

func (c *Cluster) server() string {
	return "https://" + net.JoinHostPort(c.cp.ipv4.String(), strconv.Itoa(apiPort))
}

// restConfig is a client configuration whose connections are opened inside
// the control-plane namespace, so the test process needs no address on the
// host.
func (c *Cluster) restConfig(tls rest.TLSClientConfig, token string) *rest.Config {
	return &rest.Config{
		Host:            c.server(),
		TLSClientConfig: tls,
		BearerToken:     token,
		Dial:            c.cp.ns.dial,
		QPS:             1000,
		Burst:           2000,
		UserAgent:       "eip-testenv",
	}
}

// ID is the run's unique id, part of every namespace name.
func (c *Cluster) ID() string { return c.id }

// Dir is the run directory holding logs, kubeconfigs and certificates.
func (c *Cluster) Dir() string { return c.dir }

// AdminConfig is a cluster-admin client configuration for the test process.
func (c *Cluster) AdminConfig() *rest.Config { return rest.CopyConfig(c.admin) }

// Client is a cluster-admin clientset for the test process.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// AdminKubeconfig is the path of a cluster-admin kubeconfig for processes
// running inside the run's namespaces (the server address is the
// control-plane namespace's).
func (c *Cluster) AdminKubeconfig() string { return filepath.Join(c.dir, "admin.kubeconfig") }

// Nodes lists the node namespaces in order.
func (c *Cluster) Nodes() []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := make([]Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n.node())
	}
	return nodes
}

// Node returns the node namespace of that Node name.
func (c *Cluster) Node(name string) (Node, error) {
	e, err := c.nodeEndpoint(name)
	if err != nil {
		return Node{}, err
	}
	return e.node(), nil
}

// NodeMAC is the hardware address of the eth0 of a node, or of
// ControlPlane, Client or Router.
func (c *Cluster) NodeMAC(name string) (net.HardwareAddr, error) {
	e, err := c.endpoint(name)
	if err != nil {
		return nil, err
	}
	return e.mac, nil
}

// APIServerAddr is the API server's address on the LAN.
func (c *Cluster) APIServerAddr() string {
	return net.JoinHostPort(c.cp.ipv4.String(), strconv.Itoa(apiPort))
}

// ClientHTTP is an HTTP client whose connections start in the client
// namespace, e.g. to scrape a daemon's metrics as a host on the LAN would.
func (c *Cluster) ClientHTTP() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: c.cl.ns.dial}, Timeout: 10 * time.Second}
}

func (c *Cluster) nodeEndpoint(name string) (*endpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no node %q in cluster %s", name, c.id)
}

// endpoint resolves ControlPlane, Client or a node name.
func (c *Cluster) endpoint(name string) (*endpoint, error) {
	switch name {
	case ControlPlane:
		return c.cp, nil
	case Client:
		return c.cl, nil
	case Router:
		if c.rt != nil {
			return c.rt, nil
		}
	case RoutedClient:
		if c.rcl != nil {
			return &endpoint{name: RoutedClient, ns: c.rcl}, nil
		}
	}
	return c.nodeEndpoint(name)
}

// NeighTable says which of the machine's neighbour table thresholds Start
// raised for this cluster, and from what; "" when none.
func (c *Cluster) NeighTable() string {
	return describeNeighChanges(c.neighNeed, c.neighChanges)
}

// Keep makes Close leave the run directory in place, e.g. after a failure.
func (c *Cluster) Keep() {
	c.mu.Lock()
	c.keep = true
	c.mu.Unlock()
}

// Close stops every process the cluster started, deletes its namespaces
// and, unless kept, its run directory. It is safe to call more than once
// and on a cluster that failed half-way through Start.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		probes := c.probes
		c.probes = map[*Probe]struct{}{}
		delays := c.delays
		c.delays = map[string]*delayLine{}
		procs := []*process{c.apiserver, c.etcd, c.bird}
		for _, p := range c.daemons {
			procs = append(procs, p)
		}
		c.mu.Unlock()

		var errs error
		if c.watchdog != nil {
			errs = c.watchdog.stop()
		}
		for p := range probes {
			p.Stop()
		}
		for _, d := range delays {
			d.stop()
		}
		errs = errors.Join(errs, c.stopRealNodes())
		if c.imageRegistry != nil {
			errs = errors.Join(errs, c.imageRegistry.close())
		}
		for _, p := range procs {
			if p != nil {
				// SIGKILL: nothing of the run outlives it, so nothing to
				// shut down gracefully for.
				if err := p.stop(syscall.SIGKILL, stopGrace); err != nil {
					errs = errors.Join(errs, err)
				}
			}
		}
		for _, ns := range c.namespaces() {
			if err := ns.handle.Close(); err != nil {
				errs = errors.Join(errs, fmt.Errorf("close netns handle %s: %w", ns.name, err))
			}
		}
		errs = errors.Join(errs, deleteNamespaces(c.plannedNamespaces()))
		errs = errors.Join(errs, restoreNeighLimits(c.neighChanges))
		if err := os.Remove(c.StatePath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = errors.Join(errs, fmt.Errorf("remove state: %w", err))
		}
		c.mu.Lock()
		keep := c.keep
		c.mu.Unlock()
		if keep {
			c.log.Info("run directory kept", "dir", c.dir)
		} else if err := os.RemoveAll(c.dir); err != nil {
			errs = errors.Join(errs, fmt.Errorf("remove run dir: %w", err))
		}
		c.closeErr = errs
	})
	return c.closeErr
}

func (c *Cluster) namespaces() []*namespace {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []*namespace
	for _, e := range append([]*endpoint{c.cp, c.cl, c.rt}, c.nodes...) {
		if e != nil && e.ns != nil {
			all = append(all, e.ns)
		}
	}
	if c.rcl != nil {
		all = append(all, c.rcl)
	}
	if c.lan != nil {
		all = append(all, c.lan)
	}
	return all
}

// deleteNamespaces kills whatever still runs in the namespaces (only the
// run's own processes can be there) and deletes them.
func deleteNamespaces(names []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs error
	for _, name := range names {
		if _, err := os.Stat(filepath.Join("/run/netns", name)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		ns := &namespace{name: name}
		pids, _ := ns.pids(ctx)
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = errors.Join(errs, fmt.Errorf("kill pid %d in netns %s: %w", pid, name, err))
			}
		}
		if err := run(ctx, nil, "ip", "netns", "delete", name); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	return errs
}
