// Command demo-cluster installs eip the way its users do, on real kubelet
// nodes: three nodes in network namespaces, each with containerd, a kubelet
// and kube-proxy; eipd's image from `make image` imported into every node;
// `kubectl apply -k manifests/`; a web application behind an external IP
// and a LoadBalancer IP that eip allocates. The client on the LAN then
// requests both over HTTP during a rollout restart of eipd, and the demo
// prints what it saw. Everything is torn down at the end. Run it as root
// through `make demo-cluster`.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/eip-project/eip/testenv"
	"github.com/eip-project/eip/testenv/realnode"
	"github.com/eip-project/eip/testenv/workload"
)

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo-cluster: needs root (network namespaces, cgroups); run `sudo make demo-cluster`")
		os.Exit(2)
	}
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo-cluster:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	image, version := os.Getenv("EIPD_IMAGE"), os.Getenv("VERSION")
	if image == "" || version == "" {
		return fmt.Errorf("EIPD_IMAGE (the archive of make image) and VERSION (its tag) must be set; scripts/demo-cluster.sh sets them")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	step := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	began := time.Now()
	step("starting a control plane and 3 real kubelet nodes (containerd, kubelet, kube-proxy each)")
	manifestImage, err := workload.ManifestImage()
	if err != nil {
		return err
	}
	c, err := testenv.Start(ctx, testenv.Options{
		Nodes: 3, RealNodes: true, Manifests: []string{},
		Images: []realnode.Image{{Archive: image, Ref: workload.ImageName + ":" + version, Tags: []string{manifestImage}}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	stop := c.CloseOnInterrupt()
	defer stop()
	defer c.Close()
	step("nodes Ready after %s", time.Since(began).Round(100*time.Millisecond))

	step("kubectl apply -k manifests/ (image %s, imported as make image built it); ranges:\n%s", manifestImage, workload.Ranges)
	t := time.Now()
	if err := workload.InstallEIP(ctx, c); err != nil {
		return err
	}
	step("eipd Ready on every node after %s", time.Since(t).Round(100*time.Millisecond))
	lbIP, err := workload.DeployWeb(ctx, c)
	if err != nil {
		return err
	}
	step("web app: 3 pods; Service web-ext externalIPs %s, Service web-lb got %s from eip", workload.ExternalIP, lbIP)
	ips := []netip.Addr{workload.ExternalIP, lbIP}
	for _, ip := range ips {
		h, err := workload.Holder(ctx, c, ip)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "    %s is held by %s\n", ip, h)
	}

	step("the client requests both IPs over HTTP (50/s each) and pings them every 10 ms; kubectl -n eip-system rollout restart daemonset/eipd")
	var trs []*workload.Traffic
	for _, ip := range ips {
		tr, err := workload.StartTraffic(c, ip)
		if err != nil {
			return err
		}
		defer tr.Finish()
		if err := tr.WaitAnswering(ctx); err != nil {
			return err
		}
		trs = append(trs, tr)
	}
	if _, err := c.Kubectl(ctx, "-n", testenv.Namespace, "rollout", "restart", "daemonset/eipd"); err != nil {
		return err
	}
	if err := workload.WaitDaemonSet(ctx, c); err != nil {
		return err
	}
	time.Sleep(time.Second)
	for _, tr := range trs {
		s := tr.Finish()
		fmt.Fprintf(out, "    %s\n", s)
		for pod, n := range s.Pods() {
			fmt.Fprintf(out, "        %4d answers from %s\n", n, pod)
		}
		if m := workload.TwoMACs(s.Pings); len(m) > 0 {
			fmt.Fprintf(out, "        two MACs answered: %v\n", m)
		}
	}
	step("tearing down (took %s in all)", time.Since(began).Round(time.Second))
	return nil
}
