package testenv

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Route mode's test network: with Options.Router, a router namespace on the
// LAN (host 3) runs BIRD 2 and peers with every node, and a second LAN
// behind it holds the routed client, which reaches external IPs of
// route-mode ranges only through the routes the router learned over BGP.
// BIRD rather than FRR: one small package, one process and one config
// file, and `birdc show route` names the protocol (node) of every path.
const (
	// Router and RoutedClient name those namespaces in Exec and Command.
	Router       = "router"
	RoutedClient = "routed-client"
	// RouterASN is the router's AS number; NodeASN the one the nodes are
	// expected to use (bgp-asn).
	RouterASN = 64500
	NodeASN   = 64512
	// RouterHoldTime is the hold time the router proposes: the default of
	// BGP, 90 s, so that failover is measured against it.
	RouterHoldTime = 90 * time.Second
	routerHost     = 3
)

// RouterAddr is the router's address on the LAN, the nodes' BGP peer.
func RouterAddr() (netip.Addr, netip.Addr) {
	v4, v6, _ := host(routerHost)
	return v4, v6
}

// RoutedLAN is the second LAN, behind the router.
func RoutedLAN() (netip.Prefix, netip.Prefix) {
	return netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("2001:db8:1::/64")
}

// RoutedServiceIP returns the n-th address (1 ≤ n < 256) of 198.19.100.0/24,
// a block on neither LAN: reachable only through BGP routes.
func RoutedServiceIP(n int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 19, 100, byte(n)})
}

// RoutedServiceIP6 returns the n-th address (1 ≤ n < 65536) of
// 2001:db8:100::/112, a block on neither LAN, the IPv6 twin of
// RoutedServiceIP.
func RoutedServiceIP6(n int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:100::%x", n))
}

// RoutedClientAddr is the routed client's IPv4 address.
func RoutedClientAddr() netip.Addr { return netip.MustParseAddr("198.19.0.2") }

// buildRouter creates the router and the routed client, routes the routed
// LAN from every node through the router, and starts BIRD.
func (c *Cluster) buildRouter(ctx context.Context) error {
	var err error
	v4, v6, mac := host(routerHost)
	ns, err := createNamespace(ctx, c.nsName("rt"))
	if err != nil {
		return err
	}
	c.rt = &endpoint{name: Router, ns: ns, port: "rt", ipv4: v4, ipv6: v6, mac: mac}
	if err := attach(ctx, c.lan, c.rt); err != nil {
		return err
	}
	if c.rcl, err = createNamespace(ctx, c.nsName("rcl")); err != nil {
		return err
	}
	if err := c.rt.ns.sysctl(map[string]string{
		"net.ipv4.ip_forward":              "1",
		"net.ipv6.conf.all.forwarding":     "1",
		"net.ipv6.conf.default.accept_dad": "0",
	}); err != nil {
		return err
	}
	if err := c.rcl.sysctl(map[string]string{"net.ipv6.conf.all.accept_dad": "0", "net.ipv6.conf.default.accept_dad": "0"}); err != nil {
		return err
	}
	p4, p6 := RoutedLAN()
	gw4, gw6 := p4.Addr().Next(), p6.Addr().Next()
	cl4, cl6 := RoutedClientAddr(), gw6.Next()
	steps := [][]string{
		{"-n", c.rt.ns.name, "link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns", c.rcl.name},
		{"-n", c.rt.ns.name, "link", "set", "eth1", "up"},
		{"-n", c.rt.ns.name, "addr", "add", netip.PrefixFrom(gw4, p4.Bits()).String(), "dev", "eth1"},
		{"-n", c.rt.ns.name, "addr", "add", netip.PrefixFrom(gw6, p6.Bits()).String(), "dev", "eth1", "nodad"},
		{"-n", c.rcl.name, "link", "set", "lo", "up"},
		{"-n", c.rcl.name, "link", "set", "eth0", "up"},
		{"-n", c.rcl.name, "addr", "add", netip.PrefixFrom(cl4, p4.Bits()).String(), "dev", "eth0"},
		{"-n", c.rcl.name, "addr", "add", netip.PrefixFrom(cl6, p6.Bits()).String(), "dev", "eth0", "nodad"},
		{"-n", c.rcl.name, "route", "add", "default", "via", gw4.String()},
		{"-n", c.rcl.name, "-6", "route", "add", "default", "via", gw6.String()},
	}
	for _, n := range c.nodes {
		steps = append(steps,
			[]string{"-n", n.ns.name, "route", "add", p4.String(), "via", v4.String()},
			[]string{"-n", n.ns.name, "-6", "route", "add", p6.String(), "via", v6.String()})
	}
	for _, args := range steps {
		if err := run(ctx, nil, "ip", args...); err != nil {
			return fmt.Errorf("build router: %w", err)
		}
	}
	return c.startBird(ctx)
}

// birdConfig peers passively with every node (eipd is an active-only
// speaker), imports their host routes into the router's kernel table, and
// leaves best-path selection at BIRD's defaults: MED is compared between
// routes from the same neighbour AS, which all nodes share, so the newest
// holder's lower MED wins over a dead holder's lingering route. After a
// session error (a test's wrong AS number) BIRD waits its error wait time
// before it takes the peer back, 60 s at first by default; the tests
// reconfigure peers within seconds, so it is 1 s here.
var birdConfig = template.Must(template.New("bird").Parse(`# eip testenv router
log "{{.Log}}" all;
debug protocols { states, routes };
router id {{.RouterID}};
protocol device { scan time 10; }
protocol kernel k4 { ipv4 { import none; export all; }; }
protocol kernel k6 { ipv6 { import none; export all; }; }
template bgp eipnode {
	local as {{.ASN}};
	passive on;
	hold time {{.Hold}};
	connect retry time 1;
	error wait time 1, 5;
	ipv4 { import all; export none; };
}
template bgp eipnode6 {
	local as {{.ASN}};
	passive on;
	hold time {{.Hold}};
	error wait time 1, 5;
	ipv6 { import all; export none; };
}
{{range .Nodes}}protocol bgp {{.Proto}} from eipnode { neighbor {{.V4}} as {{$.NodeASN}}; }
protocol bgp {{.Proto}}_v6 from eipnode6 { neighbor {{.V6}} as {{$.NodeASN}}; }
{{end}}`))

// birdProto is the BIRD protocol name of a node's IPv4 session.
func birdProto(node string) string { return strings.ReplaceAll(node, "-", "_") }

func (c *Cluster) startBird(ctx context.Context) error {
	type nodeView struct{ Proto, V4, V6 string }
	data := struct {
		Log, RouterID string
		ASN, NodeASN  int
		Hold          int
		Nodes         []nodeView
	}{Log: filepath.Join(c.dir, "bird.log"), RouterID: c.rt.ipv4.String(), ASN: RouterASN, NodeASN: NodeASN, Hold: int(RouterHoldTime / time.Second)}
	for _, n := range c.nodes {
		data.Nodes = append(data.Nodes, nodeView{Proto: birdProto(n.name), V4: n.ipv4.String(), V6: n.ipv6.String()})
	}
	var b strings.Builder
	if err := birdConfig.Execute(&b, data); err != nil {
		return fmt.Errorf("bird config: %w", err)
	}
	p, err := runBird(ctx, c.rt.ns, "bird", c.dir, b.String(), c.opts.StartTimeout)
	c.mu.Lock()
	c.bird = p
	c.mu.Unlock()
	return err
}

// runBird writes conf to dir/bird.conf and starts BIRD with it in ns, its
// control socket in dir, and waits until it answers. The process is
// returned, to be stopped, whenever it started.
func runBird(ctx context.Context, ns *namespace, name, dir, conf string, timeout time.Duration) (*process, error) {
	path := filepath.Join(dir, "bird.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("%s config: %w", name, err)
	}
	socket := filepath.Join(dir, "bird.ctl")
	p, err := startProcess(ns, name, filepath.Join(dir, "bird.out"), nil, "bird", "-f", "-c", path, "-s", socket)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p, p.waitFor(wctx, 50*time.Millisecond, func(ctx context.Context) error {
		_, err := birdc(ctx, socket, "show", "status")
		return err
	})
}

// birdc runs birdc against the BIRD of socket and returns its output.
func birdc(ctx context.Context, socket string, args ...string) (string, error) {
	out, err := output(ctx, nil, "birdc", append([]string{"-s", socket}, args...)...)
	return string(out), err
}

func (c *Cluster) birdSocket() string { return filepath.Join(c.dir, "bird.ctl") }

// Birdc runs birdc against the router's BIRD and returns its output.
func (c *Cluster) Birdc(ctx context.Context, args ...string) (string, error) {
	if c.rt == nil {
		return "", fmt.Errorf("cluster %s has no router (Options.Router)", c.id)
	}
	return birdc(ctx, c.birdSocket(), args...)
}

// RestartBGPSession drops the router's session with node and has the router
// wait for the node to connect again. A node whose link was cut keeps its
// session at the router until the hold timer expires; this ends it at once,
// so that the node's next eipd peers without waiting.
func (c *Cluster) RestartBGPSession(ctx context.Context, node string) error {
	out, err := c.Birdc(ctx, "restart", birdProto(node))
	if err != nil {
		return fmt.Errorf("restart the router's session with %s: %w: %s", node, err, out)
	}
	return nil
}

// RouterMAC is the hardware address of the router on the routed LAN: the
// source of every reply the routed client gets.
func (c *Cluster) RouterMAC() (net.HardwareAddr, error) {
	if c.rt == nil {
		return nil, fmt.Errorf("cluster %s has no router (Options.Router)", c.id)
	}
	h, link, err := c.device(c.rt, "eth1")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return link.Attrs().HardwareAddr, nil
}

// BGPPath is one path the router knows for a prefix.
type BGPPath struct {
	// Node is the node whose session it came from ("" when from elsewhere).
	Node string
	// Best marks the path the router uses.
	Best bool
	Via  netip.Addr
	MED  uint32
}

// BGPPaths lists the router's paths for the host route of ip.
func (c *Cluster) BGPPaths(ctx context.Context, ip netip.Addr) ([]BGPPath, error) {
	out, err := c.Birdc(ctx, "show", "route", netip.PrefixFrom(ip, ip.BitLen()).String(), "all")
	if err != nil {
		return nil, err
	}
	protoNode := map[string]string{}
	for _, n := range c.Nodes() {
		protoNode[birdProto(n.Name)] = n.Name
		protoNode[birdProto(n.Name)+"_v6"] = n.Name
	}
	return parseBirdRoutes(out, protoNode), nil
}

// parseBirdRoutes reads `birdc show route … all`: a path starts with a line
// naming "[proto since]", with " * " when it is the best; "via" and
// "BGP.med:" lines follow it.
func parseBirdRoutes(out string, protoNode map[string]string) []BGPPath {
	var paths []BGPPath
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if i := strings.Index(line, "["); i >= 0 && strings.Contains(line, "unicast") {
			proto := strings.Fields(line[i+1:])[0]
			paths = append(paths, BGPPath{Node: protoNode[proto], Best: strings.Contains(line, " * ")})
			continue
		}
		if len(paths) == 0 || len(f) < 2 {
			continue
		}
		last := &paths[len(paths)-1]
		switch f[0] {
		case "via":
			last.Via, _ = netip.ParseAddr(f[1])
		case "BGP.med:":
			n, _ := strconv.ParseUint(f[1], 10, 32)
			last.MED = uint32(n)
		}
	}
	return paths
}

// BGPSessions returns the state of the router's session with each node,
// as `birdc show protocols` words it ("Established", "Active", …).
func (c *Cluster) BGPSessions(ctx context.Context) (map[string]string, error) {
	out, err := c.Birdc(ctx, "show", "protocols")
	if err != nil {
		return nil, err
	}
	protoNode := map[string]string{}
	for _, n := range c.Nodes() {
		protoNode[birdProto(n.Name)] = n.Name
	}
	states := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// name proto table state since info…
		if len(f) >= 6 && f[1] == "BGP" && protoNode[f[0]] != "" {
			states[protoNode[f[0]]] = f[len(f)-1]
		}
	}
	return states, nil
}
