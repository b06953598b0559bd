package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
)

// The feeder is a second router on the LAN, for tests of what eipd does
// with routes a peer sends it. It runs its own BIRD in its own namespace,
// in another AS than the router, peers passively over IPv6 with every
// node and sends each a table of host routes out of FeederRoutes. eipd
// must take none of them and pass none on to the router.
const (
	// FeederASN is the feeder's AS number, not the router's: routes it
	// sends would reach the router as from another AS, which BIRD takes.
	FeederASN  = 64501
	feederHost = 4
)

// FeederRoutes is the block the feeder's routes are host routes in:
// neither LAN, nor any Service range of the tests.
var FeederRoutes = netip.MustParsePrefix("2001:db8:ffff::/96")

// FeederAddr is the feeder's IPv6 address, the peer address of its
// sessions.
func FeederAddr() netip.Addr {
	_, v6, _ := host(feederHost)
	return v6
}

// Feeder is the running feeder; Close stops it.
type Feeder struct {
	c    *Cluster
	ns   *namespace
	bird *process
	dir  string
}

var feederConfig = template.Must(template.New("feeder").Parse(`# eip testenv feeder
log "{{.Dir}}/feeder.log" { warning, error, fatal };
router id {{.RouterID}};
protocol device { scan time 10; }
protocol static feed { ipv6; {{range .Routes}}
	route {{.}} blackhole;{{end}}
}
template bgp feednode {
	local as {{.ASN}};
	passive on;
	error wait time 1, 5;{{if .Password}}
	password "{{.Password}}";{{end}}
	ipv6 { import none; export all; };
}
{{range .Nodes}}protocol bgp {{.Proto}} from feednode { neighbor {{.V6}} as {{$.NodeASN}}; }
{{end}}`))

// FeederOptions say what the feeder sends and how.
type FeederOptions struct {
	// Routes is how many host routes of FeederRoutes it sends each node.
	Routes int
	// Password, when set, is the TCP MD5 password of every session.
	Password string
}

// StartFeeder starts the feeder on a cluster with Options.Router.
func (c *Cluster) StartFeeder(ctx context.Context, opts FeederOptions) (*Feeder, error) {
	if c.rt == nil {
		return nil, fmt.Errorf("cluster %s has no router (Options.Router)", c.id)
	}
	v4, v6, mac := host(feederHost)
	ns, err := createNamespace(ctx, c.nsName("fd"))
	if err != nil {
		return nil, err
	}
	f := &Feeder{c: c, ns: ns, dir: filepath.Join(c.dir, "feeder")}
	if err := f.start(ctx, opts, &endpoint{name: "feeder", ns: ns, port: "fd", ipv4: v4, ipv6: v6, mac: mac}); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

func (f *Feeder) start(ctx context.Context, opts FeederOptions, e *endpoint) error {
	if err := attach(ctx, f.c.lan, e); err != nil {
		return err
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return fmt.Errorf("feeder: %w", err)
	}
	type nodeView struct{ Proto, V6 string }
	data := struct {
		Dir, RouterID, Password string
		ASN, NodeASN            int
		Routes                  []string
		Nodes                   []nodeView
	}{Dir: f.dir, RouterID: e.ipv4.String(), Password: opts.Password, ASN: FeederASN, NodeASN: NodeASN}
	a := FeederRoutes.Addr()
	for range opts.Routes {
		a = a.Next()
		if !FeederRoutes.Contains(a) {
			return fmt.Errorf("feeder: %d routes do not fit in %s", opts.Routes, FeederRoutes)
		}
		data.Routes = append(data.Routes, netip.PrefixFrom(a, 128).String())
	}
	for _, n := range f.c.nodes {
		data.Nodes = append(data.Nodes, nodeView{Proto: birdProto(n.name), V6: n.ipv6.String()})
	}
	var b strings.Builder
	if err := feederConfig.Execute(&b, data); err != nil {
		return fmt.Errorf("feeder config: %w", err)
	}
	var err error
	f.bird, err = runBird(ctx, f.ns, "feeder", f.dir, b.String(), f.c.opts.StartTimeout)
	return err
}

func (f *Feeder) birdc(ctx context.Context, args ...string) (string, error) {
	return birdc(ctx, filepath.Join(f.dir, "bird.ctl"), args...)
}

// FeederSession is what the feeder's BIRD shows of its session with a node.
type FeederSession struct {
	// State is the BGP state ("Established", "Active", …).
	State string
	// Exported is how many routes the feeder has sent on it.
	Exported int
	// LastError is BIRD's last error of the session, such as "Received:
	// Maximum number of prefixes reached".
	LastError string
}

// Session returns the feeder's session with node.
func (f *Feeder) Session(ctx context.Context, node string) (FeederSession, error) {
	out, err := f.birdc(ctx, "show", "protocols", "all", birdProto(node))
	if err != nil {
		return FeederSession{}, fmt.Errorf("feeder: %w: %s", err, out)
	}
	return parseBirdSession(out), nil
}

// parseBirdSession reads `birdc show protocols all NAME` of a BGP protocol.
func parseBirdSession(out string) FeederSession {
	var s FeederSession
	for _, line := range strings.Split(out, "\n") {
		key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "BGP state":
			s.State = val
		case "Last error":
			s.LastError = val
		case "Routes":
			// "0 imported, 100000 exported, 0 preferred"
			for _, part := range strings.Split(val, ",") {
				if n, what, ok := strings.Cut(strings.TrimSpace(part), " "); ok && what == "exported" {
					s.Exported, _ = strconv.Atoi(n)
				}
			}
		}
	}
	return s
}

// Close stops the feeder and deletes its namespace; its sessions close.
func (f *Feeder) Close() error {
	var errs error
	if f.bird != nil {
		errs = f.bird.stop(syscall.SIGKILL, stopGrace)
	}
	if err := f.ns.handle.Close(); err != nil {
		errs = errors.Join(errs, fmt.Errorf("close netns handle %s: %w", f.ns.name, err))
	}
	return errors.Join(errs, deleteNamespaces([]string{f.ns.name}))
}

// RoutesFrom is how many routes the router holds from node's IPv6 session.
func (c *Cluster) RoutesFrom(ctx context.Context, node string) (int, error) {
	out, err := c.Birdc(ctx, "show", "route", "protocol", birdProto(node)+"_v6", "count")
	if err != nil {
		return 0, fmt.Errorf("count routes from %s: %w: %s", node, err, out)
	}
	// "… 12 of 12 routes for 12 networks in table master6"
	f := strings.Fields(out)
	for i := range f {
		if i+2 < len(f) && f[i+1] == "of" && f[i+2] != "" {
			if n, err := strconv.Atoi(f[i]); err == nil {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("count routes from %s: cannot read %q", node, out)
}
