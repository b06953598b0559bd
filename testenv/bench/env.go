package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

const (
	svcNamespace = "default"
	benchLabel   = "eip-bench"
	// firstPingIP is the serviceIP index of the first IP that is pinged;
	// the scale runs use the indexes below it (up to 15,000 IPs), so no
	// pinged IP was ever in the client's neighbour cache before.
	firstPingIP = 15000
	// deadline bounds every wait for a condition that normally holds within
	// a second or two: a deadline, not a measurement.
	deadline = 60 * time.Second
	// poll is how often conditions are checked.
	poll = 10 * time.Millisecond
	// workers create and delete Services concurrently. More do not help:
	// 10,000 Services took 198 s on 16 and 184 s on 64, the API server
	// being the limit (docs/benchmarks.md).
	workers = 16
)

// Timing is a lease configuration the scenarios run with.
type Timing struct {
	Name  string        `json:"name"`
	Lease time.Duration `json:"leaseDuration"`
	Renew time.Duration `json:"renewInterval"`
	// BGP adds routedRange as a route-mode range, with the testenv router
	// as every node's BGP peer; the IPs pinged are then in routedRange.
	BGP bool `json:"bgp,omitempty"`
}

var (
	defaultTiming = Timing{Name: "lease 2s", Lease: 2 * time.Second, Renew: 500 * time.Millisecond}
	tunedTiming   = Timing{Name: "lease 1s", Lease: time.Second, Renew: 250 * time.Millisecond}
	routedTiming  = Timing{Name: "lease 2s", Lease: 2 * time.Second, Renew: 500 * time.Millisecond, BGP: true}
)

// routedRange holds the IPs of the bgp scenario: on neither LAN, so the
// routed client reaches them only through the routes the router learned.
var routedRange = netip.MustParsePrefix("198.19.100.0/24")

// benchRanges hold every IP the benchmark uses: serviceIP(0) to
// serviceIP(23000), 198.18.100.1 to 198.18.191.x.
var benchRanges = []netip.Prefix{netip.MustParsePrefix("198.18.96.0/19"), netip.MustParsePrefix("198.18.128.0/18")}

// configMap is eip-config for t: every benchmark IP in range.
func (t Timing) configMap() map[string]string {
	var ranges []string
	for _, p := range benchRanges {
		ranges = append(ranges, p.String())
	}
	cm := map[string]string{
		"lease-duration": t.Lease.String(),
		"renew-interval": t.Renew.String(),
	}
	if t.BGP {
		ranges = append(ranges, routedRange.String()+" announce=bgp")
		rt, _ := testenv.RouterAddr()
		cm["bgp-asn"] = strconv.Itoa(testenv.NodeASN)
		cm["bgp-peers"] = fmt.Sprintf("%s asn=%d", rt, testenv.RouterASN)
	}
	cm["ranges"] = strings.Join(ranges, "\n")
	return cm
}

// env drives one cluster through the scenarios.
type env struct {
	c       *testenv.Cluster
	k       kubernetes.Interface
	log     *slog.Logger
	nodes   []testenv.Node
	args    []string          // extra eipd flags
	config  map[string]string // extra ConfigMap keys, over every timing's
	plugin  string            // kubectl-eip binary, "" when there is none
	pingSeq int
	// routedSeq numbers the IPs of routedRange used so far.
	routedSeq int
	svcSeq    int
}

func newEnv(c *testenv.Cluster, nodes []testenv.Node, log *slog.Logger, args []string, config map[string]string, plugin string) (*env, error) {
	// The API server warns that spec.externalIPs is deprecated on each of
	// the thousands of Services created here.
	cfg := c.AdminConfig()
	cfg.WarningHandler = rest.NoWarnings{}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return &env{c: c, k: k, log: log, nodes: nodes, args: args, config: config, plugin: plugin, pingSeq: firstPingIP}, nil
}

// onNodes is e on the cluster's first n nodes (all of them when it has
// fewer).
func (e *env) onNodes(n int) *env {
	c := *e
	all := e.c.Nodes()
	c.nodes = all[:min(n, len(all))]
	return &c
}

// serviceIP is the n-th benchmark IP, skipping the .0 and .255 of each /24
// so that no address looks like a network or broadcast address.
func serviceIP(n int) netip.Addr {
	return testenv.ServiceIP(n/254*256 + n%254 + 1)
}

// pingIP returns an IP that has never been used in this run; in
// routedRange under a BGP timing, one not used for the last 253 samples.
func (e *env) pingIP(t Timing) netip.Addr {
	if t.BGP {
		e.routedSeq++
		return testenv.RoutedServiceIP((e.routedSeq-1)%254 + 1)
	}
	e.pingSeq++
	return serviceIP(e.pingSeq)
}

// oneIPSamples takes n samples of one Service IP on a cluster reset under
// timing, watching the nodes' addresses throughout. A sample that fails is
// kept (it carries its error) and the next one starts on a reset cluster
// with a fresh IP.
func oneIPSamples[S any](ctx context.Context, e *env, timing Timing, n int, sample func(w *addrWatch, ip netip.Addr, i int) (S, error)) ([]S, error) {
	w, err := watchAddrs(e.nodes, inRange)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	fresh := func() (netip.Addr, error) {
		if err := e.reset(ctx, timing, true); err != nil {
			return netip.Addr{}, err
		}
		ip := e.pingIP(timing)
		return ip, e.createServices(ctx, []netip.Addr{ip})
	}
	ip, err := fresh()
	if err != nil {
		return nil, err
	}
	var out []S
	for i := range n {
		s, err := sample(w, ip, i)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out = append(out, s)
		if err != nil {
			if ip, err = fresh(); err != nil {
				return out, err
			}
		}
	}
	return out, w.Err()
}

func (e *env) nodeNames() []string {
	var out []string
	for _, n := range e.nodes {
		out = append(out, n.Name)
	}
	return out
}

func (e *env) nodeOfMAC(mac net.HardwareAddr) string {
	for _, n := range e.nodes {
		if bytes.Equal(n.MAC, mac) {
			return n.Name
		}
	}
	return ""
}

func (e *env) mac(node string) net.HardwareAddr {
	for _, n := range e.nodes {
		if n.Name == node {
			return n.MAC
		}
	}
	return nil
}

// waitFor checks cond every poll until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: not within %s", what, timeout)
		case <-tick.C:
		}
	}
}

// pause waits d, or until ctx ends. The benchmark waits like this only to
// watch what happens over a fixed span (a steady-state window, a settle
// period after a fault); never as a way to wait for a condition.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reset brings the cluster to a known state: no eipd, no benchmark
// Services, no eip Leases, no benchmark address on any node, every link
// up, and the ConfigMap for timing. With start, eipd then runs on every
// node and has renewed its heartbeat.
func (e *env) reset(ctx context.Context, timing Timing, start bool) error {
	// Every node of the cluster: a scenario on more nodes than e.nodes may
	// have left daemons running on the others.
	for _, n := range e.c.Nodes() {
		if err := e.c.StopDaemon(n.Name, syscall.SIGKILL); err != nil {
			return err
		}
		if err := e.c.RestoreLink(ctx, n.Name); err != nil {
			return err
		}
	}
	if err := e.deleteServices(ctx); err != nil {
		return err
	}
	if err := e.k.CoordinationV1().Leases(testenv.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: lease.ManagedByLabel}); err != nil {
		return fmt.Errorf("reset: delete leases: %w", err)
	}
	if err := waitFor(ctx, deadline, "benchmark addresses to expire on every node", func() (bool, error) {
		for _, n := range e.nodes {
			c, err := e.boundCount(n.Name)
			if err != nil || c > 0 {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	if err := e.setConfig(ctx, e.configFor(timing)); err != nil {
		return err
	}
	if !start {
		return nil
	}
	return e.join(ctx, timing)
}

// join starts eipd on every node at once and waits until each has renewed
// its heartbeat, and then a lease duration: a daemon that has just started
// takes nothing for a renew interval while it learns its live peers, so
// what comes after meets the settled cluster.
func (e *env) join(ctx context.Context, timing Timing) error {
	at := time.Now()
	if err := parallel(len(e.nodes), func(i int) error { return e.c.StartDaemon(e.nodes[i].Name, e.args...) }); err != nil {
		return err
	}
	for _, n := range e.nodes {
		if err := e.waitRenewed(ctx, n.Name, at); err != nil {
			return err
		}
	}
	if timing.BGP {
		if err := e.peered(ctx, e.nodeNames()...); err != nil {
			return err
		}
	}
	return pause(ctx, timing.Lease)
}

// startDaemon starts eipd on node and waits until it renewed its heartbeat.
func (e *env) startDaemon(ctx context.Context, node string) error {
	at := time.Now()
	if err := e.c.StartDaemon(node, e.args...); err != nil {
		return err
	}
	return e.waitRenewed(ctx, node, at)
}

// waitRenewed waits until node's heartbeat was renewed after t.
func (e *env) waitRenewed(ctx context.Context, node string, t time.Time) error {
	return waitFor(ctx, deadline, "heartbeat of "+node, func() (bool, error) {
		l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(ctx, lease.HeartbeatName(node), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(t), nil
	})
}

// configFor is eip-config for timing, with the run's extra keys.
func (e *env) configFor(timing Timing) map[string]string {
	cm := timing.configMap()
	maps.Copy(cm, e.config)
	return cm
}

func (e *env) setConfig(ctx context.Context, data map[string]string) error {
	cms := e.k.CoreV1().ConfigMaps(testenv.Namespace)
	cm, err := cms.Get(ctx, testenv.ConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: testenv.ConfigMap}, Data: data}, metav1.CreateOptions{})
	} else if err == nil {
		cm.Data = data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("set %s: %w", testenv.ConfigMap, err)
	}
	return nil
}

// serviceIPs creates one Service for each of the first n benchmark IPs,
// and returns the IPs.
func (e *env) serviceIPs(ctx context.Context, n int) ([]netip.Addr, error) {
	addrs := make([]netip.Addr, n)
	for i := range addrs {
		addrs[i] = serviceIP(i)
	}
	return addrs, e.createServices(ctx, addrs)
}

// createServices creates one Service per IP, several at once.
func (e *env) createServices(ctx context.Context, ips []netip.Addr) error {
	names := make([]string, len(ips))
	for i := range ips {
		e.svcSeq++
		names[i] = "bench-" + strconv.Itoa(e.svcSeq)
	}
	return parallel(len(ips), func(i int) error {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: svcNamespace, Labels: map[string]string{benchLabel: "true"}},
			Spec: corev1.ServiceSpec{
				Ports:       []corev1.ServicePort{{Name: "http", Port: 80}},
				ExternalIPs: []string{ips[i].String()},
			},
		}
		_, err := e.k.CoreV1().Services(svcNamespace).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create service for %s: %w", ips[i], err)
		}
		return nil
	})
}

func (e *env) deleteServices(ctx context.Context) error {
	svcs, err := e.k.CoreV1().Services(svcNamespace).List(ctx, metav1.ListOptions{LabelSelector: benchLabel})
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	return parallel(len(svcs.Items), func(i int) error {
		err := e.k.CoreV1().Services(svcNamespace).Delete(ctx, svcs.Items[i].Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete service %s: %w", svcs.Items[i].Name, err)
		}
		return nil
	})
}

// parallel runs fn(0) … fn(n-1) on a few goroutines and joins the errors.
func parallel(n int, fn func(i int) error) error { return parallelOn(workers, n, fn) }

// parallelOn is parallel on the given number of goroutines.
func parallelOn(goroutines, n int, fn func(i int) error) error {
	var (
		mu   sync.Mutex
		errs error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	for range min(goroutines, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = errors.Join(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// holder is the holder of ip's lock, "" when it has none.
func (e *env) holder(ctx context.Context, ip netip.Addr) (string, error) {
	l, err := e.k.CoordinationV1().Leases(testenv.Namespace).Get(ctx, lease.NameFor(ip), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read lock of %s: %w", ip, err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// inRange reports whether ip is one the benchmark manages.
func inRange(ip netip.Addr) bool {
	if routedRange.Contains(ip) {
		return true
	}
	for _, p := range benchRanges {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// boundAddrs lists the benchmark IPs bound on node's eth0.
func (e *env) boundAddrs(node string) ([]netip.Addr, error) {
	all, err := e.c.NodeAddrs(node)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, p := range all {
		if inRange(p.Addr()) {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}

func (e *env) boundCount(node string) (int, error) {
	a, err := e.boundAddrs(node)
	return len(a), err
}

// served waits until ip has a holder, and the client's pings of it are
// answered by that holder's MAC. It returns the holder.
func (e *env) served(ctx context.Context, p *testenv.Probe, ip netip.Addr) (string, error) {
	var holder string
	err := waitFor(ctx, deadline, ip.String()+" answering from its holder", func() (bool, error) {
		h, err := e.holder(ctx, ip)
		if err != nil || h == "" {
			return false, err
		}
		holder = h
		return answeringFrom(p.Result(), e.mac(h), time.Now()), nil
	})
	return holder, err
}

// answeringFrom: the latest reply, less than 100 ms old, came from mac.
func answeringFrom(r testenv.ProbeResult, mac net.HardwareAddr, now time.Time) bool {
	if len(r.Replies) == 0 {
		return false
	}
	last := r.Replies[len(r.Replies)-1]
	return bytes.Equal(last.MAC, mac) && now.Sub(last.At) < 100*time.Millisecond
}

// firstReplyAfter is the first reply after t whose MAC is not mac.
func firstReplyAfter(r testenv.ProbeResult, t time.Time, not net.HardwareAddr) (testenv.Reply, bool) {
	for _, rep := range r.Replies {
		if rep.At.After(t) && !bytes.Equal(rep.MAC, not) {
			return rep, true
		}
	}
	return testenv.Reply{}, false
}
