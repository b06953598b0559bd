// Command testenv brings a test cluster up for a person to use, and down
// again: the same cluster the end-to-end tests use (see package testenv),
// left running after the command exits.
//
//	testenv up [-nodes N] [-daemons] [-eipd PATH]
//	testenv down [ID…]   (default: every cluster started by up, and stale ones)
//	testenv list
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eip-project/eip/testenv"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
}

const usage = "usage: testenv up [-nodes N] [-daemons] [-eipd PATH] | down [ID...] | list"

func run(args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "up":
		return up(args[1:], out, errOut)
	case "down":
		return down(args[1:], out)
	case "list":
		return list(out)
	}
	return errors.New(usage)
}

func up(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	nodes := fs.Int("nodes", 3, "number of node namespaces")
	daemons := fs.Bool("daemons", false, "start eipd on every node")
	eipd := fs.String("eipd", "", "eipd binary (default $EIPD_BIN or bin/eipd)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := testenv.Start(ctx, testenv.Options{
		Nodes:   *nodes,
		EipdBin: *eipd,
		Detach:  true,
		KeepDir: true,
		Logger:  slog.New(slog.NewTextHandler(errOut, nil)),
	})
	if err != nil {
		return err
	}
	if *daemons {
		for _, n := range c.Nodes() {
			if err := c.StartDaemon(n.Name); err != nil {
				return errors.Join(err, c.Close())
			}
		}
	}
	s := c.State()
	kubectl := fmt.Sprintf("ip netns exec %s %s --kubeconfig %s", s.ClientNetns, s.Kubectl, s.Kubeconfig)
	fmt.Fprintf(out, "cluster %s is up; run directory %s (logs, kubeconfigs); state %s\n\n", s.ID, s.Dir, c.StatePath())
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tIPv4\tIPv6\tMAC\tNETNS\tEIPD")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\n", n.Name, n.IPv4, n.IPv6, n.MAC, n.Netns, c.DaemonRunning(n.Name))
	}
	tw.Flush()
	fmt.Fprintf(out, `
kubectl, as a host on the LAN (client namespace):
  alias k='%s'
  k get nodes
run something on a node:   ip netns exec %s ip addr
ping an external IP:       ip netns exec %s ping %s
start eipd by hand:        ip netns exec %s bin/eipd %s
tear down:                 scripts/testenv-down.sh %s
`, kubectl, s.Nodes[0].Netns, s.ClientNetns, testenv.ServiceIP(1), s.Nodes[0].Netns, strings.Join(c.DaemonArgs(s.Nodes[0].Name), " "), s.ID)
	return nil
}

func down(ids []string, out io.Writer) error {
	states, err := testenv.ReadStates()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var errs error
	var found []string
	for _, s := range states {
		if len(ids) > 0 && !want[s.ID] || len(ids) == 0 && !s.Detached && !s.Stale() {
			continue
		}
		found = append(found, s.ID)
		delete(want, s.ID)
		if err := testenv.Teardown(s); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		fmt.Fprintf(out, "cluster %s is down\n", s.ID)
	}
	for id := range want {
		errs = errors.Join(errs, fmt.Errorf("no cluster %s", id))
	}
	if len(found) == 0 && len(ids) == 0 {
		fmt.Fprintln(out, "no cluster to tear down")
	}
	return errs
}

func list(out io.Writer) error {
	states, err := testenv.ReadStates()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOWNER\tSTATE\tNODES\tDIR")
	for _, s := range states {
		state := "running"
		switch {
		case s.Detached:
			state = "detached"
		case s.Stale():
			state = "stale"
		}
		var nodes []string
		for _, n := range s.Nodes {
			nodes = append(nodes, n.Name)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.ID, s.Owner, state, strings.Join(nodes, ","), s.Dir)
	}
	return tw.Flush()
}
