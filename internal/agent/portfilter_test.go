package agent

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/netif"
)

// fakePortFilter is the port filter as the kernel would hold it.
type fakePortFilter struct {
	addrs   []netip.Addr
	served  []netif.Served
	removed bool
	sets    int
	fail    error // the next Set fails with it
}

func (f *fakePortFilter) Set(addrs []netip.Addr, served []netif.Served) error {
	if err := f.fail; err != nil {
		f.fail = nil
		return err
	}
	f.sets++
	f.addrs, f.served, f.removed = slices.Clone(addrs), slices.Clone(served), false
	return nil
}

func (f *fakePortFilter) Remove() error {
	f.addrs, f.served, f.removed = nil, nil, true
	return nil
}

// The filter follows the Services: an IP lets through its Services'
// ports (TCP when the protocol is unset, UDP, SCTP), a port of each
// Service that names it; a Service deleted takes its ports and its IP
// with it. A failed apply is applied again at the next resync. With
// port-filter off the table is removed, and comes back when it is on.
func TestLoopPortFilterFollowsTheServices(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	ip, other := testIP(0), testIP(1)
	w.addService("web", ip)
	svc := w.svcObj("web")
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Protocol: corev1.ProtocolUDP, Port: 53}, corev1.ServicePort{Protocol: corev1.ProtocolSCTP, Port: 9})
	w.putService(svc)
	w.addService("dns", other)
	w.pass()
	assert.DeepEqual(t, w.filter.addrs, []netip.Addr{ip, other}, cmpAddr())
	assert.DeepEqual(t, w.filter.served, []netif.Served{
		{Addr: ip, Proto: unix.IPPROTO_TCP, Port: 80}, {Addr: ip, Proto: unix.IPPROTO_UDP, Port: 53}, {Addr: ip, Proto: unix.IPPROTO_SCTP, Port: 9},
		{Addr: other, Proto: unix.IPPROTO_TCP, Port: 80},
	}, cmpAddr())

	w.filter.fail = errors.New("netlink: no buffer space")
	w.deleteService("web")
	w.s.sched.dirtySvc = true
	w.pass()
	assert.Equal(t, len(w.filter.addrs), 2, "the failed apply changed the filter")
	w.step(w.a.opt.Resync)
	w.s.resync(false)
	w.pass()
	assert.DeepEqual(t, w.filter.addrs, []netip.Addr{other}, cmpAddr())
	assert.DeepEqual(t, w.filter.served, []netif.Served{{Addr: other, Proto: unix.IPPROTO_TCP, Port: 80}}, cmpAddr())

	cfg := defaultTestConfig()
	cfg["port-filter"] = "off"
	w.setConfig(cfg)
	w.pass()
	assert.Assert(t, w.filter.removed)
	cfg["port-filter"] = "on"
	w.setConfig(cfg)
	w.pass()
	assert.Assert(t, !w.filter.removed)
	assert.DeepEqual(t, w.filter.addrs, []netip.Addr{other}, cmpAddr())
}

func cmpAddr() cmp.Option { return cmpopts.EquateComparable(netip.Addr{}) }

// setConfig writes the ConfigMap's data, as an edit the informer delivers.
func (w *world) setConfig(data map[string]string) {
	w.must(w.cms.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testCM, ResourceVersion: w.nextRV()}, Data: data}))
	w.s.sched.dirtyCM = true
}
