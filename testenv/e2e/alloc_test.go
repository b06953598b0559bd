package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"
	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/internal/ipset"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// Ranges of the allocation tests, inside the suite's test blocks
// (198.18.100.0/22, 2001:db8::100:0/112): pool and pool6 auto-assign,
// fixed only on request.
var (
	pool   = netip.MustParsePrefix("198.18.101.0/24")
	pool6  = netip.MustParsePrefix("2001:db8::100:100/120")
	fixed1 = netip.MustParseAddr("198.18.102.10")
)

func allocConfig() map[string]string {
	return map[string]string{"ranges": strings.Join([]string{
		"198.18.100.0/24",
		pool.String() + " name=pool auto-assign",
		"198.18.102.10-198.18.102.19 name=fixed",
		pool6.String() + " name=pool6 auto-assign",
	}, "\n")}
}

type svcOption func(*corev1.Service)

func annotated(k, v string) svcOption {
	return func(s *corev1.Service) { s.Annotations[k] = v }
}

func withPorts(ports ...int32) svcOption {
	return func(s *corev1.Service) {
		s.Spec.Ports = nil
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p})
		}
	}
}

func dualStack(s *corev1.Service) {
	p := corev1.IPFamilyPolicyRequireDualStack
	s.Spec.IPFamilyPolicy = &p
}

func (e *env) newLB(name string, opts ...svcOption) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: svcNamespace, Labels: map[string]string{e2eLabel: "true"}, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	for _, o := range opts {
		o(svc)
	}
	return svc
}

// lbService creates a LoadBalancer Service.
func (e *env) lbService(name string, opts ...svcOption) {
	e.t.Helper()
	_, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, e.newLB(name, opts...), metav1.CreateOptions{})
	e.must(err)
}

func (e *env) getService(name string) *corev1.Service {
	e.t.Helper()
	svc, err := e.k.CoreV1().Services(svcNamespace).Get(e.ctx, name, metav1.GetOptions{})
	e.must(err)
	return svc
}

// lbIPs waits until the Service's status lists n addresses, and returns them.
func (e *env) lbIPs(name string, n int) []netip.Addr {
	e.t.Helper()
	var ips []netip.Addr
	e.eventually(name+" has "+fmt.Sprint(n)+" load-balancer addresses", func() (bool, string) {
		ips = alloc.Current(ipset.ServiceOf(e.getService(name)))
		return len(ips) == n, fmt.Sprint(ips)
	})
	return ips
}

// stays asserts that the Service's status keeps listing ips for a while:
// nothing reallocates behind the test's back.
func (e *env) stays(name string, ips []netip.Addr, d time.Duration) {
	e.t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		assert.DeepEqual(e.t, alloc.Current(ipset.ServiceOf(e.getService(name))), ips, cmpAddrs)
	}
}

var cmpAddrs = cmpopts.EquateComparable(netip.Addr{})

func lower(a, b netip.Addr) netip.Addr {
	if b.Less(a) {
		return b
	}
	return a
}

func higher(a, b netip.Addr) netip.Addr {
	if b.Less(a) {
		return a
	}
	return b
}

// eventMessage waits for an event of reason on the Service that contains
// want.
func (e *env) eventMessage(name, reason, want string) {
	e.t.Helper()
	e.eventually(reason+" event on "+name, func() (bool, string) {
		var msgs []string
		for _, ev := range e.events("Service", name, reason) {
			if strings.Contains(ev.Message, want) {
				return true, ""
			}
			msgs = append(msgs, ev.Message)
		}
		return false, fmt.Sprintf("want %q, have %q", want, msgs)
	})
}

// locks lists the lock Leases by IP.
func (e *env) locks() map[netip.Addr]string {
	e.t.Helper()
	list, err := e.k.CoordinationV1().Leases(testenv.Namespace).List(e.ctx, metav1.ListOptions{LabelSelector: lease.RoleLabel + "=" + lease.RoleLock})
	e.must(err)
	out := map[netip.Addr]string{}
	for _, l := range list.Items {
		lk, err := lease.ParseLock(&l)
		e.must(err)
		out[lk.IP] = lk.Holder
	}
	return out
}

// logLines counts, over every node's eipd log, the lines containing s.
func (e *env) logLines(s string) int {
	n := 0
	for _, node := range e.nodes {
		b, _ := os.ReadFile(e.c.DaemonLog(node))
		n += strings.Count(string(b), s)
	}
	return n
}

// raceSize is the number of Services the allocation race tests create at
// once.
const raceSize = 50

// createAtOnce creates the Services race-00 … from n goroutines.
func (e *env) createAtOnce(n int) {
	e.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := e.k.CoreV1().Services(svcNamespace).Create(e.ctx, e.newLB(fmt.Sprintf("race-%02d", i)), metav1.CreateOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.must(err)
	}
}

// distinctAllocations waits until each of the n test Services has one
// address of pool, no address given twice, one held lock per address and
// no reservation left over, each address served by its holder alone. It
// returns the addresses, sorted, and when the last Service was seen to have
// its address.
func (e *env) distinctAllocations(n int) ([]netip.Addr, time.Time) {
	e.t.Helper()
	owner := map[netip.Addr]string{}
	e.eventually("every Service has an address", func() (bool, string) {
		list, err := e.k.CoreV1().Services(svcNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: e2eLabel})
		if err != nil {
			return false, err.Error()
		}
		clear(owner)
		missing := 0
		for _, svc := range list.Items {
			ips := alloc.Current(ipset.ServiceOf(&svc))
			if len(ips) == 0 {
				missing++
				continue
			}
			assert.Equal(e.t, len(ips), 1, "%s: %v", svc.Name, ips)
			assert.Assert(e.t, pool.Contains(ips[0]), "%s got %s, outside %s", svc.Name, ips[0], pool)
			if other, dup := owner[ips[0]]; dup {
				e.t.Fatalf("%s given to both %s and %s", ips[0], other, svc.Name)
			}
			owner[ips[0]] = svc.Name
		}
		return missing == 0, fmt.Sprintf("%d of %d without an address", missing, n)
	})
	allocated := time.Now()
	assert.Equal(e.t, len(owner), n)
	e.eventually("one lock per address, no reservation left over", func() (bool, string) {
		locks := e.locks()
		for ip := range owner {
			if locks[ip] == "" {
				return false, ip.String() + " has no held lock"
			}
		}
		return len(locks) == n, fmt.Sprintf("%d locks", len(locks))
	})
	var ips []netip.Addr
	for ip := range owner {
		e.served(ip)
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	// The pool's first addresses, none skipped but the network address.
	assert.Equal(e.t, ips[0], netip.MustParseAddr("198.18.101.1"))
	assert.Equal(e.t, ips[n-1], netip.MustParseAddr(fmt.Sprintf("198.18.101.%d", n)))
	return ips, allocated
}

// raceStats describes, from the daemons' logs since the marks, how often
// nodes collided.
func (e *env) raceStats(lostMark, conflictMark int) string {
	return fmt.Sprintf("%d reservations found their address already locked, %d status writes lost a race",
		e.logLines("address already locked")-lostMark, e.logLines("service changed while allocating")-conflictMark)
}

// 50 Services created at once on 3 running nodes get 50 distinct
// addresses, each locked once and served by its holder, and no reservation
// is left over.
func TestAllocationRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	lost, conflicts := e.logLines("address already locked"), e.logLines("service changed while allocating")
	start := time.Now()
	e.createAtOnce(raceSize)
	ips, allocated := e.distinctAllocations(raceSize)
	t.Logf("%d Services got %d distinct addresses (%s … %s) within %s, all served; %s",
		raceSize, len(ips), ips[0], ips[len(ips)-1], allocated.Sub(start).Round(time.Millisecond), e.raceStats(lost, conflicts))
}

// The same race at its worst: 50 Services wait while no daemon runs, and
// all three start at once, each seeing all 50 before it sees its peers.
func TestAllocationRaceAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	for _, n := range e.nodes {
		e.must(e.c.StopDaemon(n, syscall.SIGKILL))
	}
	e.createAtOnce(raceSize)
	lost, conflicts := e.logLines("address already locked"), e.logLines("service changed while allocating")
	start := time.Now()
	for _, n := range e.nodes {
		e.must(e.c.StartDaemon(n))
	}
	ips, allocated := e.distinctAllocations(raceSize)
	t.Logf("%d waiting Services got %d distinct addresses (%s … %s) within %s of 3 daemons starting at once, all served; %s",
		raceSize, len(ips), ips[0], ips[len(ips)-1], allocated.Sub(start).Round(time.Millisecond), e.raceStats(lost, conflicts))
}

// A requested address is honoured; the same address requested by another
// Service is refused with an event until the first lets it go; addresses
// outside every range are refused.
func TestRequestedAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	want := netip.MustParseAddr("198.18.102.12")
	e.lbService("a", func(s *corev1.Service) { s.Spec.LoadBalancerIP = want.String() })
	assert.DeepEqual(t, e.lbIPs("a", 1), []netip.Addr{want}, cmpAddrs)
	e.served(want)
	e.eventMessage("a", "IPAllocated", want.String())

	e.lbService("b", annotated(alloc.AnnotationIPs, want.String()))
	e.eventMessage("b", "AllocationFailed", "requested address 198.18.102.12: used by default/a")
	e.lbService("c", annotated(alloc.AnnotationIPs, "198.18.99.1"))
	e.eventMessage("c", "AllocationFailed", "requested address 198.18.99.1: outside every configured range")
	e.lbService("d", annotated(alloc.AnnotationIPs, "198.18.101.255"))
	e.eventMessage("d", "AllocationFailed", "the broadcast address of range")
	assert.Equal(t, len(e.events("Service", "b", "AllocationFailed")), 1, "one event, not one per node")
	for _, name := range []string{"b", "c", "d"} {
		assert.Equal(t, len(alloc.Current(ipset.ServiceOf(e.getService(name)))), 0, name)
	}

	e.deleteService("a")
	assert.DeepEqual(t, e.lbIPs("b", 1), []netip.Addr{want}, cmpAddrs)
	e.served(want)
}

// A range chosen by name, though it is not auto-assign.
func TestRangeByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	e.lbService("a", annotated(alloc.AnnotationRange, "fixed"))
	e.lbService("b", annotated(alloc.AnnotationRange, "fixed"))
	a, b := e.lbIPs("a", 1)[0], e.lbIPs("b", 1)[0]
	assert.Equal(t, lower(a, b), fixed1, "the first address of range fixed")
	assert.Equal(t, lower(a, b).Next(), higher(a, b))
	e.served(a)
	e.served(b)
	e.lbService("c", annotated(alloc.AnnotationRange, "nope"))
	e.eventMessage("c", "AllocationFailed", `no range is named "nope"`)

	// kubectl eip status --ranges counts both addresses in range fixed,
	// each bound by its live holder.
	out, err := e.kubectlEip("status", "--ranges", "-o", "json")
	e.must(err)
	var rep cli.RangeReport
	e.must(json.Unmarshal([]byte(out), &rep))
	i := slices.IndexFunc(rep.Ranges, func(r cli.RangeUse) bool { return r.Name == "fixed" })
	assert.Assert(t, i >= 0, "no range fixed in %s", out)
	assert.DeepEqual(t, rep.Ranges[i], cli.RangeUse{Name: "fixed", Addresses: "198.18.102.10-198.18.102.19", Family: "IPv4",
		Capacity: 10, Allocated: 2, Bound: 2, Free: 8, Namespaces: []string{}, Announce: "arp"})

	// Every eipd exports the same counts; bound summed over the nodes.
	e.eventually("every eipd counts range fixed as kubectl eip does", func() (bool, string) {
		var bound float64
		var got []string
		ok := true
		for _, n := range e.nodes {
			m := e.scrape(n).samples
			allocated, free := m[`eip_range_addresses{range="fixed",state="allocated"}`], m[`eip_range_addresses{range="fixed",state="free"}`]
			ok = ok && allocated == 2 && free == 8
			bound += m[`eip_range_addresses{range="fixed",state="bound"}`]
			got = append(got, fmt.Sprintf("%s: allocated %v free %v", n, allocated, free))
		}
		return ok && bound == 2, fmt.Sprintf("%v, bound %v in all", got, bound)
	})
}

// A dual-stack Service gets one address of each family, and both answer
// the client.
func TestDualStackAllocation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	e.lbService("dual", dualStack)
	ips := e.lbIPs("dual", 2)
	svc := e.getService("dual")
	assert.DeepEqual(t, svc.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol})
	assert.Assert(t, pool.Contains(ips[0]), "%v", ips)
	assert.Assert(t, pool6.Contains(ips[1]), "%v", ips)
	for _, ip := range ips {
		holder := e.served(ip)
		p := e.probe(ip)
		e.answersFrom(p, holder)
		e.noTwoMACs(p.Stop())
	}
}

// Services with one sharing key share an address when their ports do not
// clash; a clash takes another address, or is refused when the address
// was requested.
func TestSharing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	key := annotated(alloc.AnnotationSharingKey, "web")
	e.lbService("http", key, withPorts(80))
	ip := e.lbIPs("http", 1)[0]
	e.lbService("https", key, withPorts(443))
	assert.DeepEqual(t, e.lbIPs("https", 1), []netip.Addr{ip}, cmpAddrs)
	holder := e.served(ip)

	e.lbService("other-http", key, withPorts(80))
	other := e.lbIPs("other-http", 1)[0]
	assert.Assert(t, other != ip, "a clash takes another address")
	e.lbService("clash", key, withPorts(443), annotated(alloc.AnnotationIPs, ip.String()))
	e.eventMessage("clash", "AllocationFailed", "port TCP/443 clashes with default/https")
	e.lbService("nokey", withPorts(8080), annotated(alloc.AnnotationIPs, ip.String()))
	e.eventMessage("nokey", "AllocationFailed", "used by default/http")

	// One Service goes; the address stays with the other.
	e.deleteService("http")
	e.stays("https", []netip.Addr{ip}, time.Second)
	assert.Equal(t, e.served(ip), holder)
}

// Deleting a Service or changing its type frees its address: lock
// deleted, address unbound, and the next Service gets it.
func TestReleaseOnDeleteAndTypeChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	e.lbService("a")
	a := e.lbIPs("a", 1)[0]
	e.served(a)
	e.lbService("b")
	b := e.lbIPs("b", 1)[0]
	e.served(b)

	e.deleteService("a")
	e.eventually(a.String()+" released", func() (bool, string) {
		return e.lock(a) == nil && len(e.boundOn(a)) == 0, fmt.Sprintf("lock %v, bound on %v", e.lock(a) != nil, e.boundOn(a))
	})

	svc := e.getService("b")
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.AllocateLoadBalancerNodePorts = nil
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	_, err := e.k.CoreV1().Services(svcNamespace).Update(e.ctx, svc, metav1.UpdateOptions{})
	assert.NilError(t, err)
	e.eventually(b.String()+" released", func() (bool, string) {
		return e.lock(b) == nil && len(e.boundOn(b)) == 0, fmt.Sprintf("lock %v, bound on %v", e.lock(b) != nil, e.boundOn(b))
	})

	e.lbService("c")
	assert.DeepEqual(t, e.lbIPs("c", 1), []netip.Addr{lower(a, b)}, cmpAddrs)
}

// Allocation lives in Leases and Service status only: every daemon killed
// and started again, every Service keeps its addresses, served again.
func TestAllocationSurvivesRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		e.lbService(n)
	}
	e.lbService("dual", dualStack)
	before := map[string][]netip.Addr{"dual": e.lbIPs("dual", 2)}
	for _, n := range names {
		before[n] = e.lbIPs(n, 1)
	}
	for _, n := range e.nodes {
		e.must(e.c.StopDaemon(n, syscall.SIGKILL))
	}
	for _, n := range e.nodes {
		e.start(n)
	}
	for name, ips := range before {
		for _, ip := range ips {
			e.served(ip)
		}
		e.stays(name, ips, 200*time.Millisecond)
	}
	assert.Equal(t, len(e.locks()), 6)
}

// A range removed from the configuration: its Services keep their status
// (no surprise reallocation), the address is no longer bound and is
// reported; the range back, it is served again.
func TestRangeRemovedKeepsStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	e.lbService("a")
	ip := e.lbIPs("a", 1)[0]
	e.served(ip)

	cfg := allocConfig()
	cfg["ranges"] = strings.ReplaceAll(cfg["ranges"], pool.String()+" name=pool auto-assign\n", "")
	e.setConfig(cfg)
	e.eventMessage("a", "AddressRejected", ip.String()+" is not bound by eip: outside every configured range")
	e.eventually(ip.String()+" unbound", func() (bool, string) {
		return len(e.boundOn(ip)) == 0 && e.lock(ip) == nil, fmt.Sprint(e.boundOn(ip))
	})
	e.stays("a", []netip.Addr{ip}, time.Second)

	e.setConfig(allocConfig())
	e.served(ip)
	e.stays("a", []netip.Addr{ip}, 200*time.Millisecond)
}

// A node that dies between reserving and writing the status leaves a
// reservation behind: the Service it was made for gets that address, and
// a live node takes the lock over from the dead one. A reservation for a
// Service that never appears is deleted after the grace period.
func TestReservationOfDeadNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, allocConfig())
	reserve := func(ip netip.Addr, service string) {
		l := lease.NewLockLease(testenv.Namespace, ip, "node-gone", "", []string{service}, time.Now())
		l.Annotations[alloc.AnnotationReservedFor] = service
		_, err := e.k.CoordinationV1().Leases(testenv.Namespace).Create(e.ctx, l, metav1.CreateOptions{})
		e.must(err)
	}
	kept, stale := netip.MustParseAddr("198.18.101.5"), netip.MustParseAddr("198.18.101.6")
	reserve(kept, "default/late")
	reserve(stale, "default/never")
	made := time.Now()

	e.lbService("late")
	assert.DeepEqual(t, e.lbIPs("late", 1), []netip.Addr{kept}, cmpAddrs)
	holder := e.served(kept)
	assert.Assert(t, holder != "node-gone")

	e.eventually("the stale reservation is deleted", func() (bool, string) {
		return e.lock(stale) == nil, "still there"
	})
	t.Logf("stale reservation deleted %s after it was made", time.Since(made).Round(100*time.Millisecond))
	assert.Assert(t, time.Since(made) >= 2*time.Second, "not before the grace period, a lease duration")
	e.lbService("next")
	assert.DeepEqual(t, e.lbIPs("next", 1), []netip.Addr{netip.MustParseAddr("198.18.101.1")}, cmpAddrs)
}
