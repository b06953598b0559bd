package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/bench"
)

// The tenant of the hostile Services.
const tenantHostile = "eip-e2e-hostile"

// hostile are the hostile Services of TestHostileServicesCostEipdLittle:
// how many, their eip.io/junk annotation and their ports.
const (
	hostileServices = 500
	hostileJunk     = 250 << 10
	hostilePorts    = 10000
)

// hostileService is a ClusterIP Service of tenantHostile that names no
// address, with a 250 KiB eip.io/junk annotation (the API server takes at
// most 256 KiB of annotations in all) and 10,000 ports (it bounds their
// number only by the object's size, 2 MiB as it writes it to etcd: 40,000
// pass with such an annotation).
func hostileService(i int) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: hostileName(i), Namespace: tenantHostile, Labels: map[string]string{e2eLabel: "true"},
			Annotations: map[string]string{"eip.io/junk": strings.Repeat("x", hostileJunk)}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	for p := range hostilePorts {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Protocol: corev1.ProtocolTCP, Port: int32(1 + p)})
	}
	return svc
}

func hostileName(i int) string { return fmt.Sprintf("hostile-%d", i) }

// A tenant cannot take every eipd down with its Services: 500 ClusterIP
// Services, each with a 250 KiB eip.io/junk annotation and 10,000 ports,
// half a MiB each as the API server sends them to every eipd, leave each
// eipd's RSS under 64 MiB, the DaemonSet's memory request: its peak
// (VmHWM of /proc/<pid>/status) from its start until every eipd has seen
// the last Service, and while an eipd started afresh reads them all at
// once, as after a rollout or an OOM kill. No eipd exits, and the
// addresses served before answer throughout, from the nodes they live on.
// Were eipd to keep the annotations (or the ports) of the Services that
// are not its own, each would hold over 100 MiB more: the test fails
// then, after about 100 Services.
func TestHostileServicesCostEipdLittle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.tenant(tenantHostile)
	// The addresses live on the first two nodes; the third, holding none,
	// starts afresh once the hostile Services exist.
	fresh := e.nodes[2]
	ips := []netip.Addr{testenv.ServiceIP(196), testenv.ServiceIP(197), testenv.ServiceIP(198), testenv.ServiceIP(199)}
	victims := ips[:3]
	for i, ip := range victims {
		e.serviceIn(svcNamespace, fmt.Sprintf("victim-%d", i), []netip.Addr{ip}, annotated(ipset.AnnotationPreferredNodes, e.nodes[i%2]))
	}
	holders := e.servedAll(victims...)
	probes := map[netip.Addr]*testenv.Probe{}
	for _, ip := range victims {
		probes[ip] = e.probe(ip)
		e.answersFrom(probes[ip], holders[ip])
	}
	m := e.memoryWatch()
	watch := func(what string, until <-chan struct{}) {
		t.Helper()
		e.while(what, until, m.check(e.stillAnswering(probes, holders, time.Second)))
	}

	began := time.Now()
	created := make(chan struct{})
	var errs []error
	ctx, cancel := context.WithCancel(e.ctx)
	go func() {
		defer close(created)
		errs = eachHostile(ctx, func(ctx context.Context, i int) error {
			if _, err := e.k.CoreV1().Services(tenantHostile).Create(ctx, hostileService(i), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create %s/%s: %w", tenantHostile, hostileName(i), err)
			}
			return nil
		})
	}()
	// A test that fails early creates no more; the Services are deleted
	// by name, as listing them would read 250 MiB.
	t.Cleanup(func() {
		cancel()
		<-created
		for _, err := range eachHostile(context.Background(), func(ctx context.Context, i int) error {
			err := e.k.CoreV1().Services(tenantHostile).Delete(ctx, hostileName(i), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %s/%s: %w", tenantHostile, hostileName(i), err)
			}
			return nil
		}) {
			t.Error(err)
		}
	})
	watch(fmt.Sprintf("while %d Services of %s were created", hostileServices, tenantHostile), created)
	for _, err := range errs {
		t.Fatal(err)
	}
	raw, err := e.k.CoreV1().RESTClient().Get().Namespace(tenantHostile).Resource("services").Name(hostileName(0)).
		SetHeader("Accept", "application/vnd.kubernetes.protobuf").DoRaw(e.ctx)
	e.must(err)
	t.Logf("%d Services of %s created in %s, each of %.2f MiB as the API server sends it to eipd (protobuf)",
		hostileServices, tenantHostile, time.Since(began).Round(time.Second), float64(len(raw))/(1<<20))

	// Every eipd sees a Service created after the last hostile one only
	// once it has seen them all: a watch delivers in order.
	last := ips[3]
	e.serviceIn(svcNamespace, "victim-last", []netip.Addr{last}, annotated(ipset.AnnotationPreferredNodes, e.nodes[0]))
	e.managesAll(m, len(ips), e.nodes...)
	for _, n := range e.nodes {
		t.Logf("%s: eipd RSS %.1f MiB before the hostile Services, at most %.1f MiB since it started, %.1f MiB now",
			n, mib(m.before[n].RSS), mib(m.peak[n]), mib(m.now(n).RSS))
	}

	// An eipd started afresh reads every hostile Service in its first list.
	e.must(e.c.StopDaemon(fresh, syscall.SIGTERM))
	e.start(fresh)
	m.restarted(fresh)
	e.managesAll(m, len(ips), fresh)
	e.throughout("every eipd under 64 MiB and every address answered", 2*leaseDuration, m.check(e.stillAnswering(probes, holders, time.Second)))
	t.Logf("%s: eipd started afresh, at most %.1f MiB, %.1f MiB now", fresh, mib(m.peak[fresh]), mib(m.now(fresh).RSS))
	for ip, p := range probes {
		r := p.Stop()
		e.noTwoMACs(r)
		if r.Lost() > r.Sent/100 {
			t.Errorf("%s: %d of %d pings lost", ip, r.Lost(), r.Sent)
		}
	}
}

// eachHostile calls do with each hostile Service's index, four at a
// time, until ctx is done, and returns its errors.
func eachHostile(ctx context.Context, do func(context.Context, int) error) []error {
	indexes := make(chan int)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range indexes {
				if err := do(ctx, i); err != nil && ctx.Err() == nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range hostileServices {
		select {
		case indexes <- i:
		case <-ctx.Done():
		}
	}
	close(indexes)
	wg.Wait()
	return errs
}

// managesAll waits until eipd on each of nodes manages n addresses, while
// m's checks hold.
func (e *env) managesAll(m *memoryWatch, n int, nodes ...string) {
	e.t.Helper()
	for _, node := range nodes {
		e.eventually(fmt.Sprintf("%s manages %d addresses", node, n), func() (bool, string) {
			if msg := m.check(func() string { return "" })(); msg != "" {
				e.t.Fatal(msg)
			}
			v := e.scrape(node).samples["eip_ips_managed"]
			return v == float64(n), fmt.Sprintf("eip_ips_managed %v", v)
		})
	}
}

// memoryBound is the RSS no eipd may reach: the DaemonSet's memory request.
const memoryBound = 64 << 20

// memoryWatch follows the eipd process of every node: its memory, and
// that it is the same process.
type memoryWatch struct {
	e      *env
	pids   map[string]int
	before map[string]bench.ProcSample
	peak   map[string]int64
}

func (e *env) memoryWatch() *memoryWatch {
	e.t.Helper()
	m := &memoryWatch{e: e, pids: map[string]int{}, before: map[string]bench.ProcSample{}, peak: map[string]int64{}}
	for _, n := range e.nodes {
		m.restarted(n)
		m.before[n] = m.now(n)
	}
	return m
}

// restarted follows the eipd that now runs on node.
func (m *memoryWatch) restarted(node string) {
	m.pids[node], m.peak[node] = m.e.c.DaemonPID(node), 0
}

func (m *memoryWatch) now(node string) bench.ProcSample {
	m.e.t.Helper()
	s, err := bench.ReadProc(m.pids[node])
	m.e.must(err)
	return s
}

// check is a condition for throughout: that also of more, and that every
// eipd is the process followed and has stayed under memoryBound since it
// started.
func (m *memoryWatch) check(more func() string) func() string {
	return func() string {
		for _, n := range m.e.nodes {
			if pid := m.e.c.DaemonPID(n); pid != m.pids[n] {
				return fmt.Sprintf("eipd on %s is process %d, was %d", n, pid, m.pids[n])
			}
			s, err := bench.ReadProc(m.pids[n])
			if err != nil {
				return err.Error()
			}
			if m.peak[n] = max(m.peak[n], s.PeakRSS); s.PeakRSS >= memoryBound {
				return fmt.Sprintf("eipd on %s reached an RSS of %.1f MiB (now %.1f MiB)", n, mib(s.PeakRSS), mib(s.RSS))
			}
		}
		return more()
	}
}

// while fails the test as soon as cond says something is wrong, checking
// it until done is closed.
func (e *env) while(what string, done <-chan struct{}, cond func() string) {
	e.t.Helper()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	for {
		if msg := cond(); msg != "" {
			e.t.Fatalf("%s, after %s: %s", what, time.Since(began).Round(time.Millisecond), msg)
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
