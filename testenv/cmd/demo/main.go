// Command demo shows eip working on a real local cluster: a control plane
// and three nodes in network namespaces, a Service with two external IPs,
// the client on the LAN pinging them, the holder's eipd killed and the
// failover timed as the client saw it, and a planned move. With -bgp it
// shows route mode instead: a BIRD router peering with the nodes and a
// client behind it (see bgp.go). It tears everything down when it ends.
// Run it as root through `make demo` or `make demo-bgp`.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: needs root (network namespaces); run `sudo make demo`")
		os.Exit(2)
	}
	bgp := flag.Bool("bgp", false, "route mode: a BGP router, a routed client, a failover and a move through the router")
	flag.Parse()
	if err := run(os.Stdout, *bgp); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	ctx context.Context
	out io.Writer
	c   *testenv.Cluster
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "\n==> "+format+"\n", args...)
}

func run(out io.Writer, bgp bool) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	what := "3 nodes and a client"
	if bgp {
		what = "3 nodes, a client, a BGP router (BIRD 2) and a routed client behind it"
	}
	step(out, "starting a cluster: etcd + kube-apiserver, %s in network namespaces", what)
	start := time.Now()
	c, err := testenv.Start(ctx, testenv.Options{Nodes: 3, Router: bgp, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer func() {
		step(out, "tearing everything down")
		err = errors.Join(err, c.Close())
	}()
	fmt.Fprintf(out, "cluster up in %s; RBAC from manifests/ applied; eipd runs as ServiceAccount eip-system/eip\n", time.Since(start).Round(100*time.Millisecond))
	d := &demo{ctx: ctx, out: out, c: c}
	if bgp {
		return d.showBGP()
	}
	return d.show()
}

func (d *demo) show() error {
	k := d.c.Client()
	ips := []netip.Addr{testenv.ServiceIP(1), testenv.ServiceIP(2)}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.ConfigMap, Namespace: testenv.Namespace},
		Data:       map[string]string{"ranges": "198.18.100.0/24", "policy": "sticky"},
	}
	step(d.out, "ConfigMap %s/%s: ranges 198.18.100.0/24, policy sticky; starting eipd on every node", testenv.Namespace, testenv.ConfigMap)
	if _, err := k.CoreV1().ConfigMaps(testenv.Namespace).Create(d.ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, n := range d.c.Nodes() {
		if err := d.c.StartDaemon(n.Name); err != nil {
			return err
		}
	}
	step(d.out, "creating Service default/demo with external IPs %s and %s", ips[0], ips[1])
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Ports:       []corev1.ServicePort{{Name: "http", Port: 80}},
			ExternalIPs: []string{ips[0].String(), ips[1].String()},
		},
	}
	created := time.Now()
	if _, err := k.CoreV1().Services("default").Create(d.ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, ip := range ips {
		if _, err := d.waitHolder(ip, ""); err != nil {
			return err
		}
	}
	fmt.Fprintf(d.out, "both IPs held and answering %s after the Service was created\n", time.Since(created).Round(time.Millisecond))
	if err := d.table(ips); err != nil {
		return err
	}
	d.plugin("status")

	step(d.out, "pinging the IPs from the client namespace")
	for _, ip := range ips {
		out, err := d.c.Exec(d.ctx, testenv.Client, "ping", "-c", "3", "-i", "0.2", "-W", "1", ip.String())
		if err != nil {
			return fmt.Errorf("ping %s: %w\n%s", ip, err, out)
		}
		fmt.Fprintf(d.out, "%s: %s\n", ip, summary(out))
	}

	ip := ips[0]
	holder, err := d.waitHolder(ip, "")
	if err != nil {
		return err
	}
	step(d.out, "killing eipd on %s (SIGKILL), the holder of %s, while the client pings it every 10 ms", holder, ip)
	p, err := d.c.Probe(ip, 10*time.Millisecond)
	if err != nil {
		return err
	}
	if err := waitFor(5*time.Second, func() bool { return len(p.Result().Replies) > 10 }); err != nil {
		return fmt.Errorf("no replies before the fault: %w", err)
	}
	if err := d.c.StopDaemon(holder, syscall.SIGKILL); err != nil {
		return err
	}
	killed := time.Now()
	next, err := d.waitHolder(ip, holder)
	if err != nil {
		return err
	}
	nextMAC, err := d.c.NodeMAC(next)
	if err != nil {
		return err
	}
	if err := waitFor(10*time.Second, func() bool { return firstFrom(p.Result(), nextMAC, killed) > 0 }); err != nil {
		return fmt.Errorf("no reply from %s after the failover: %w", next, err)
	}
	r := p.Stop()
	fmt.Fprintf(d.out, "failover: %s now answers for %s; first reply from its MAC %s after the kill (lease-duration 2s)\n",
		next, ip, firstFrom(r, nextMAC, killed).Round(time.Millisecond))
	fmt.Fprintf(d.out, "client view: %d pings, %d lost, longest gap %s, intervals with two MACs answering: %d\n",
		r.Sent, r.Lost(), r.LongestGap().Duration().Round(time.Millisecond), len(r.Overlaps()))
	if err := d.c.StartDaemon(holder); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "eipd restarted on %s; with policy sticky it takes nothing back\n", holder)
	if err := d.table(ips); err != nil {
		return err
	}

	second, err := d.waitHolder(ips[1], "")
	if err != nil {
		return err
	}
	if d.plugin("move", ips[1].String(), d.other(second)) {
		d.plugin("status")
	}
	return nil
}

// plugin runs `kubectl eip ARGS` in the client namespace, through
// kubectl's plugin mechanism, and prints what it printed. It reports
// whether it succeeded.
func (d *demo) plugin(args ...string) bool {
	bin := os.Getenv("KUBECTL_EIP_BIN")
	if bin == "" {
		bin = "bin/kubectl-eip"
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return false
	}
	step(d.out, "kubectl eip %s", strings.Join(args, " "))
	cmd := append([]string{"env", "PATH=" + filepath.Dir(abs) + ":/usr/bin:/bin", "KUBECONFIG=" + d.c.AdminKubeconfig(), d.c.KubectlPath(), "eip"}, args...)
	out, err := d.c.Exec(d.ctx, testenv.Client, cmd...)
	d.out.Write(out)
	if err != nil {
		fmt.Fprintf(d.out, "(kubectl eip %s failed: %v)\n", args[0], err)
		return false
	}
	return true
}

// waitHolder waits until ip has a holder other than not, bound there and
// answering the client's ARP with that node's MAC.
func (d *demo) waitHolder(ip netip.Addr, not string) (string, error) {
	return d.holderWhere(ip, not, "answering holder", func(holder string) bool {
		mac, err := d.c.NodeMAC(holder)
		if err != nil {
			return false
		}
		macs, err := d.c.WhoAnswers(ip)
		return err == nil && len(macs) == 1 && bytes.Equal(macs[0], mac)
	})
}

// holderWhere waits until ip's lock has a holder other than not for which
// ok holds, and returns it; what names such a holder in the error.
func (d *demo) holderWhere(ip netip.Addr, not, what string, ok func(holder string) bool) (string, error) {
	var holder string
	err := waitFor(30*time.Second, func() bool {
		l, err := d.c.Client().CoordinationV1().Leases(testenv.Namespace).Get(d.ctx, lease.NameFor(ip), metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == not {
			return false
		}
		holder = *l.Spec.HolderIdentity
		return ok(holder)
	})
	if err != nil {
		return "", fmt.Errorf("%s has no %s: %w", ip, what, err)
	}
	return holder, nil
}

// table prints who holds each IP as the Leases say and who answers it as
// the client sees it.
func (d *demo) table(ips []netip.Addr) error {
	tw := tabwriter.NewWriter(d.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "IP\tLOCK LEASE\tHOLDER\tANSWERED BY (client ARP)")
	for _, ip := range ips {
		l, err := d.c.Client().CoordinationV1().Leases(testenv.Namespace).Get(d.ctx, lease.NameFor(ip), metav1.GetOptions{})
		if err != nil {
			return err
		}
		macs, err := d.c.WhoAnswers(ip)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ip, l.Name, *l.Spec.HolderIdentity, d.describe(macs))
	}
	return tw.Flush()
}

func (d *demo) describe(macs []net.HardwareAddr) string {
	var parts []string
	for _, m := range macs {
		name := "?"
		for _, n := range d.c.Nodes() {
			if bytes.Equal(n.MAC, m) {
				name = n.Name
			}
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", name, m))
	}
	if len(parts) == 0 {
		return "nobody"
	}
	return strings.Join(parts, ", ")
}

func (d *demo) other(not ...string) string {
	for _, n := range d.c.Nodes() {
		ok := true
		for _, x := range not {
			ok = ok && n.Name != x
		}
		if ok {
			return n.Name
		}
	}
	return ""
}

// firstFrom is how long after t the first reply from mac came; 0 if none.
func firstFrom(r testenv.ProbeResult, mac net.HardwareAddr, t time.Time) time.Duration {
	for _, rep := range r.Replies {
		if rep.At.After(t) && bytes.Equal(rep.MAC, mac) {
			return rep.At.Sub(t)
		}
	}
	return 0
}

// summary keeps ping's statistics lines.
func summary(out []byte) string {
	var keep []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "packets transmitted") || strings.HasPrefix(line, "rtt") {
			keep = append(keep, strings.TrimSpace(line))
		}
	}
	return strings.Join(keep, "; ")
}

func waitFor(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
