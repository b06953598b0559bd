package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/eip-project/eip/internal/alloc"
	"github.com/eip-project/eip/internal/ipset"
)

// otherLB is a second load balancer beside eip, as MetalLB is during a
// migration: it gives every LoadBalancer Service without a
// spec.loadBalancerClass the next of its addresses, by writing the
// Service's status.loadBalancer.ingress, and does nothing else.
type otherLB struct {
	e     *env
	addrs []netip.Addr // not yet given
	mu    sync.Mutex
	given map[string]netip.Addr // by Service name
}

// startOtherLB runs an otherLB with addrs until the test ends.
func (e *env) startOtherLB(addrs ...netip.Addr) *otherLB {
	e.t.Helper()
	o := &otherLB{e: e, addrs: addrs, given: map[string]netip.Addr{}}
	ctx, cancel := context.WithCancel(e.ctx)
	w, err := e.k.CoreV1().Services(svcNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: e2eLabel})
	e.must(err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range w.ResultChan() {
			if svc, ok := ev.Object.(*corev1.Service); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				o.claim(ctx, svc)
			}
		}
	})
	e.t.Cleanup(func() {
		cancel()
		w.Stop()
		wg.Wait()
	})
	return o
}

// claim gives svc an address if it is a class-less LoadBalancer Service
// without one.
func (o *otherLB) claim(ctx context.Context, svc *corev1.Service) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerClass != nil || len(svc.Status.LoadBalancer.Ingress) > 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.addrs) == 0 {
		o.e.t.Errorf("other load balancer: no address left for %s", svc.Name)
		return
	}
	svc = svc.DeepCopy()
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: o.addrs[0].String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	if _, err := o.e.k.CoreV1().Services(svcNamespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{FieldManager: "other-lb"}); err != nil {
		if ctx.Err() == nil {
			o.e.t.Errorf("other load balancer: status of %s: %v", svc.Name, err)
		}
		return
	}
	o.given[svc.Name], o.addrs = o.addrs[0], o.addrs[1:]
}

// addr waits until the other load balancer gave the Service an address,
// and returns it.
func (o *otherLB) addr(name string) netip.Addr {
	o.e.t.Helper()
	var ip netip.Addr
	o.e.eventually("the other load balancer's address for "+name, func() (bool, string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		ip = o.given[name]
		return ip.IsValid(), fmt.Sprint(o.given)
	})
	return ip
}

// With load-balancer-class only, eip and another load balancer serve side
// by side: the other one claims the class-less Services, with addresses
// inside eip's own auto-assign range, and eip never touches them (no
// lock, no bound address, no ARP answer, no status write, no Event),
// while it serves the Services of its class. External IPs have no class:
// external-ips keeps deciding for them, also on a class-less Service.
func TestClassOnlyLeavesClasslessServicesToAnother(t *testing.T) {
	t.Parallel()
	cfg := allocConfig()
	cfg["load-balancer-class"] = "only"
	e := newEnv(t, cfg)
	// The other load balancer's addresses lie in eip's pool: an operator
	// moving Services one at a time gives both the same range.
	a := pool.Addr().Next()
	theirs := []netip.Addr{a, a.Next(), a.Next().Next()}
	other := e.startOtherLB(theirs...)

	external := netip.MustParseAddr("198.18.100.33")
	names := []string{"theirs-1", "theirs-2", "theirs-mixed"}
	e.lbService(names[0])
	e.lbService(names[1])
	e.lbService(names[2], func(s *corev1.Service) { s.Spec.ExternalIPs = []string{external.String()} })
	var given []netip.Addr
	for _, n := range names {
		given = append(given, other.addr(n))
	}
	// Created after the others: once eip serves it, its loop has seen them.
	e.lbService("ours", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(ipset.LoadBalancerClass) })
	ours := e.lbIPs("ours", 1)[0]
	assert.Check(t, pool.Contains(ours) && !slices.Contains(theirs, ours), "eip gave %s, want a free address of %s", ours, pool)
	t.Logf("eip serves ours at %s on %s; the other load balancer gave %v", ours, e.served(ours), given)
	// spec.externalIPs have no class: with external-ips on, eip serves the
	// external IP of a class-less Service.
	e.served(external)

	locks := e.locks()
	_, locked := locks[ours]
	assert.Check(t, locked, "no lock for eip's own %s", ours)
	assert.Check(t, wroteBy(e.getService("ours"), "eipd"), "eipd's status write on ours is not in its managedFields")
	for i, name := range names {
		ip := given[i]
		_, locked := locks[ip]
		assert.Check(t, !locked, "eip locked %s of %s", ip, name)
		assert.Check(t, is.Len(e.boundOn(ip), 0), "%s of %s is bound", ip, name)
		macs, err := e.c.WhoAnswers(ip)
		e.must(err)
		assert.Check(t, is.Len(macs, 0), "%s of %s answered by %v", ip, name, macs)
		svc := e.getService(name)
		assert.DeepEqual(t, alloc.Current(ipset.ServiceOf(svc)), []netip.Addr{ip}, cmpAddrs)
		assert.Check(t, !wroteBy(svc, "eipd"), "eipd wrote %s: %v", name, svc.ManagedFields)
		for _, ev := range e.serviceEvents(svc) {
			// The mixed Service's external IP is eip's, and its Events
			// name that address.
			if name != "theirs-mixed" || !strings.Contains(ev.Message, external.String()) || strings.Contains(ev.Message, ip.String()) {
				t.Errorf("event on %s: %s %s from %s: %s", name, ev.Type, ev.Reason, ev.Source.Component, ev.Message)
			}
		}
	}
}

// wroteBy reports whether manager wrote any field of the Service.
func wroteBy(svc *corev1.Service, manager string) bool {
	return slices.ContainsFunc(svc.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == manager })
}

// serviceEvents are every Event about the Service.
func (e *env) serviceEvents(svc *corev1.Service) []corev1.Event {
	e.t.Helper()
	list, err := e.k.CoreV1().Events(svc.Namespace).List(e.ctx, metav1.ListOptions{})
	e.must(err)
	var out []corev1.Event
	for _, ev := range list.Items {
		if ev.InvolvedObject.UID == svc.UID {
			out = append(out, ev)
		}
	}
	return out
}
