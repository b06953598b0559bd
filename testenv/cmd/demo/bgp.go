package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/testenv"
)

// showBGP is the route-mode demo (make demo-bgp): a BIRD 2 router on the
// nodes' LAN peers with every eipd, and a client on a second LAN behind
// the router reaches the Service's IP only through the route the router
// learned from the IP's holder. The holder is then killed with its link
// cut: its BGP session, and its route, stay at the router until the 90 s
// hold timer, yet the client is answered again within about a lease
// duration, because the new holder's route has a lower MED. Then a planned
// move through the router.
func (d *demo) showBGP() error {
	k := d.c.Client()
	ip := testenv.RoutedServiceIP(1)
	rt, _ := testenv.RouterAddr()
	p4, _ := testenv.RoutedLAN()
	ranges := "198.19.100.0/24 announce=bgp"
	peers := fmt.Sprintf("%s asn=%d", rt, testenv.RouterASN)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.ConfigMap, Namespace: testenv.Namespace},
		Data:       map[string]string{"ranges": ranges, "bgp-asn": strconv.Itoa(testenv.NodeASN), "bgp-peers": peers},
	}
	step(d.out, "ConfigMap %s/%s: ranges %q, bgp-asn %d, bgp-peers %q; starting eipd on every node",
		testenv.Namespace, testenv.ConfigMap, ranges, testenv.NodeASN, peers)
	fmt.Fprintf(d.out, "the router (AS %d, %s, BIRD 2) peers with every node; the routed client %s is on %s behind it\n",
		testenv.RouterASN, rt, testenv.RoutedClientAddr(), p4)
	if _, err := k.CoreV1().ConfigMaps(testenv.Namespace).Create(d.ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, n := range d.c.Nodes() {
		if err := d.c.StartDaemon(n.Name); err != nil {
			return err
		}
	}
	if err := d.peered(); err != nil {
		return err
	}
	d.birdc("show", "protocols")

	step(d.out, "creating Service default/demo with external IP %s (in the BGP range)", ip)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Ports:       []corev1.ServicePort{{Name: "http", Port: 80}},
			ExternalIPs: []string{ip.String()},
		},
	}
	created := time.Now()
	if _, err := k.CoreV1().Services("default").Create(d.ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	holder, err := d.routedTo(ip, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%s holds %s and announces %s/32; the router's best path points at it %s after the Service was created\n",
		holder, ip, ip, time.Since(created).Round(time.Millisecond))
	d.birdc("show", "route", "all", netip.PrefixFrom(ip, 32).String())
	d.plugin("status")

	step(d.out, "pinging %s from the routed client (%s), through the router", ip, testenv.RoutedClientAddr())
	out, err := d.c.Exec(d.ctx, testenv.RoutedClient, "ping", "-c", "3", "-i", "0.2", "-W", "1", ip.String())
	if err != nil {
		return fmt.Errorf("ping %s: %w\n%s", ip, err, out)
	}
	fmt.Fprintf(d.out, "%s: %s\n", ip, summary(out))

	step(d.out, "cutting %s's link and killing its eipd (SIGKILL), while the routed client pings %s every 10 ms", holder, ip)
	p, err := d.c.RoutedProbe(ip, 10*time.Millisecond)
	if err != nil {
		return err
	}
	if err := waitFor(5*time.Second, func() bool { return len(p.Result().Replies) > 10 }); err != nil {
		return fmt.Errorf("no replies before the fault: %w", err)
	}
	if err := d.c.CutLink(d.ctx, holder); err != nil {
		return err
	}
	// The link is down from here: a reply to a later request came through
	// another node.
	cut := time.Now()
	after := p.Result().Sent
	if err := d.c.StopDaemon(holder, syscall.SIGKILL); err != nil {
		return err
	}
	next, err := d.routedTo(ip, holder)
	if err != nil {
		return err
	}
	var answered time.Duration
	if err := waitFor(10*time.Second, func() bool {
		for _, rep := range p.Result().Replies {
			if rep.Seq >= after {
				answered = rep.At.Sub(cut)
				return true
			}
		}
		return false
	}); err != nil {
		return fmt.Errorf("no reply after the failover: %w", err)
	}
	r := p.Stop()
	fmt.Fprintf(d.out, "failover: %s took over; the routed client was answered again %s after the cut (lease-duration 2s)\n",
		next, answered.Round(time.Millisecond))
	fmt.Fprintf(d.out, "client view: %d pings, %d lost, longest gap %s\n", r.Sent, r.Lost(), r.LongestGap().Duration().Round(time.Millisecond))
	fmt.Fprintf(d.out, "the router still lists %s's route until its %s hold timer expires, but prefers %s's lower MED:\n",
		holder, testenv.RouterHoldTime, next)
	d.birdc("show", "route", "all", netip.PrefixFrom(ip, 32).String())

	step(d.out, "restoring %s's link, ending its stale session at the router, restarting its eipd", holder)
	if err := d.c.RestoreLink(d.ctx, holder); err != nil {
		return err
	}
	if err := d.c.RestartBGPSession(d.ctx, holder); err != nil {
		return err
	}
	if err := d.c.StartDaemon(holder); err != nil {
		return err
	}
	if err := d.peered(); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%s peered again; it holds nothing, so it announces nothing\n", holder)
	d.birdc("show", "route", "all", netip.PrefixFrom(ip, 32).String())

	to := d.other(next)
	p, err = d.c.RoutedProbe(ip, 10*time.Millisecond)
	if err != nil {
		return err
	}
	if d.plugin("move", ip.String(), to) {
		if _, err := d.routedTo(ip, next); err != nil {
			return err
		}
		seen := len(p.Result().Replies)
		if err := waitFor(5*time.Second, func() bool { return len(p.Result().Replies) > seen+20 }); err != nil {
			return fmt.Errorf("no replies after the move: %w", err)
		}
		r := p.Stop()
		fmt.Fprintf(d.out, "routed client during the move: %d pings, %d lost, longest gap %s\n",
			r.Sent, r.Lost(), r.LongestGap().Duration().Round(time.Millisecond))
		d.birdc("show", "route", "all", netip.PrefixFrom(ip, 32).String())
	}
	p.Stop()
	return nil
}

// birdc prints what `birdc ARGS` prints at the router.
func (d *demo) birdc(args ...string) {
	step(d.out, "birdc %s (at the router)", strings.Join(args, " "))
	out, err := d.c.Birdc(d.ctx, args...)
	fmt.Fprint(d.out, out)
	if err != nil {
		fmt.Fprintf(d.out, "(birdc failed: %v)\n", err)
	}
}

// peered waits until the router has an established session with every node.
func (d *demo) peered() error {
	return waitFor(30*time.Second, func() bool {
		states, err := d.c.BGPSessions(d.ctx)
		if err != nil {
			return false
		}
		for _, n := range d.c.Nodes() {
			if states[n.Name] != "Established" {
				return false
			}
		}
		return true
	})
}

// routedTo waits until ip has a holder other than not and the router's
// only best path for ip comes from that holder, and returns the holder.
func (d *demo) routedTo(ip netip.Addr, not string) (string, error) {
	return d.holderWhere(ip, not, "holder the router routes it to", func(holder string) bool {
		paths, err := d.c.BGPPaths(d.ctx, ip)
		if err != nil {
			return false
		}
		best := 0
		for _, p := range paths {
			if p.Best {
				best++
				if p.Node != holder {
					return false
				}
			}
		}
		return best == 1
	})
}
