package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/cli"
	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// pluginDir returns a directory holding kubectl-eip, for PATH. kubectl
// finds plugins by file name, so the binary gets its plugin name whatever
// KUBECTL_EIP_BIN (default bin/kubectl-eip) calls it.
func (e *env) pluginDir() string {
	e.t.Helper()
	bin := os.Getenv("KUBECTL_EIP_BIN")
	if bin == "" {
		root, err := testenv.RepoRoot()
		e.must(err)
		bin = filepath.Join(root, "bin", "kubectl-eip")
	}
	abs, err := filepath.Abs(bin)
	e.must(err)
	if _, err := os.Stat(abs); err != nil {
		e.t.Skipf("kubectl-eip is not built (make build, or set KUBECTL_EIP_BIN): %v", err)
	}
	dir := e.t.TempDir()
	e.must(os.Symlink(abs, filepath.Join(dir, "kubectl-eip")))
	return dir
}

// kubectlEip runs `kubectl eip ARGS` from the client namespace the way an
// operator does: the real kubectl finds kubectl-eip on PATH, and the
// kubeconfig comes from $KUBECONFIG. Standard output is returned; the error
// carries standard error and the exit status.
func (e *env) kubectlEip(args ...string) (string, error) {
	e.t.Helper()
	cmd := append([]string{"env", "PATH=" + e.pluginDir() + ":/usr/local/bin:/usr/bin:/bin", "KUBECONFIG=" + e.c.AdminKubeconfig(),
		e.c.KubectlPath(), "eip"}, args...)
	out, err := e.c.Exec(e.ctx, testenv.Client, cmd...)
	return string(out), err
}

// pluginStatus runs `kubectl eip status -o json`.
func (e *env) pluginStatus() cli.Status {
	e.t.Helper()
	out, err := e.kubectlEip("status", "-o", "json")
	e.must(err)
	var st cli.Status
	e.must(json.Unmarshal([]byte(out), &st))
	return st
}

func statusRow(st cli.Status, ip netip.Addr) (cli.IP, bool) {
	for _, r := range st.IPs {
		if r.IP == ip.String() {
			return r, true
		}
	}
	return cli.IP{}, false
}

// status, through kubectl's plugin mechanism, shows what the locks say and
// what the client sees.
func TestPluginStatusMatchesLocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ips := []netip.Addr{testenv.ServiceIP(110), testenv.ServiceIP(111), testenv.ServiceIPv6(110)}
	e.service("web", ips...)
	outside := netip.MustParseAddr("198.18.200.7")
	e.service("outside", outside)
	holders := map[netip.Addr]string{}
	for _, ip := range ips {
		holders[ip] = e.served(ip)
	}

	st := e.pluginStatus()
	assert.Equal(t, st.Namespace, testenv.Namespace)
	assert.Equal(t, st.Config.Error, "")
	for _, ip := range ips {
		r, ok := statusRow(st, ip)
		assert.Assert(t, ok, "no row for %s", ip)
		assert.Equal(t, r.Holder, holders[ip], "%s", ip)
		assert.Equal(t, r.State, cli.StateBound, "%s: %s", ip, r.Reason)
		assert.Assert(t, r.HolderAlive, "%s", ip)
		assert.Assert(t, r.Successor != "" && r.Successor != r.Holder && slices.Contains(e.nodes, r.Successor),
			"%s: successor %q of holder %s", ip, r.Successor, r.Holder)
		assert.DeepEqual(t, r.Services, []string{"default/web"})
		macs, err := e.c.WhoAnswers(ip)
		e.must(err)
		assert.Equal(t, len(macs), 1)
		assert.Equal(t, e.nodeOfMAC(macs[0]), r.Holder, "the client sees the holder the plugin names")
	}
	r, ok := statusRow(st, outside)
	assert.Assert(t, ok, "no row for %s", outside)
	assert.Equal(t, r.State, cli.StateOutOfRange)
	assert.Equal(t, len(st.Nodes), len(e.nodes))
	for _, n := range st.Nodes {
		assert.Assert(t, n.Alive && n.Eligible, "%+v", n)
	}

	table, err := e.kubectlEip("status", "-o", "wide")
	e.must(err)
	t.Logf("kubectl eip status -o wide:\n%s", table)
	for _, ip := range ips {
		assert.Assert(t, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(ip.String())+` +default/web +`+holders[ip]+` +auto/\d+ +bound +yes `).MatchString(table),
			"row of %s", ip)
	}

	list, err := e.c.Exec(e.ctx, testenv.Client, "env", "PATH="+e.pluginDir()+":/usr/bin:/bin", e.c.KubectlPath(), "plugin", "list")
	e.must(err)
	assert.Assert(t, strings.Contains(string(list), "kubectl-eip"), "kubectl plugin list: %s", list)
}

// move hands the IP over: the client's pings follow to the new node's MAC,
// never answered by two, and with sticky it stays there.
func TestPluginMoveClientFollows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(112)
	e.service("web", ip)
	old := e.served(ip)
	target := e.other(old)
	before := e.pluginStatus()
	row, _ := statusRow(before, ip)
	p := e.probe(ip)
	e.answersFrom(p, old)

	asked := time.Now()
	out, err := e.kubectlEip("move", ip.String(), target)
	e.must(err)
	took := time.Since(asked)
	m := regexp.MustCompile(`^moved ` + regexp.QuoteMeta(ip.String()) + ` from ` + old + ` to ` + target + ` in (\S+)\n$`).FindStringSubmatch(out)
	assert.Assert(t, m != nil, "output %q", out)
	assert.Equal(t, e.holder(ip), target, "the lock names the target when move returns")
	e.answersFrom(p, target)
	e.clientFollows(ip, target)
	r := p.Stop()
	e.noTwoMACs(r)
	gap := handoverGap(r, e.mac(old), e.mac(target))
	t.Logf("kubectl eip move: %q; the command took %s (kubectl and plugin start-up, reads); the client's last reply from %s came %s before its first from %s",
		strings.TrimSpace(out), took.Round(time.Millisecond), old, gap.Round(time.Millisecond), target)
	assert.Assert(t, gap < time.Second, "gap %s", gap)

	after := e.pluginStatus()
	moved, _ := statusRow(after, ip)
	assert.Equal(t, moved.Holder, target)
	assert.Equal(t, moved.State, cli.StateBound)
	assert.Equal(t, moved.Moves, row.Moves+1)
	assert.Equal(t, moved.MoveTo, "")
	assert.Equal(t, e.served(ip), target, "sticky keeps it on the node it was moved to")

	// Moving it back with --wait=false returns at once; the daemons finish.
	out, err = e.kubectlEip("move", ip.String(), old, "--wait=false")
	e.must(err)
	assert.Equal(t, out, fmt.Sprintf("requested move of %s from %s to %s\n", ip, target, old))
	assert.Equal(t, e.served(ip), old)
}

// A dead holder cannot hand off: the target takes the IP itself once it
// judges the holder dead, ahead of the other survivors. A longer lease
// duration leaves the plugin time to ask before anyone takes over unasked.
func TestPluginMoveFromDeadHolder(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	cfg["lease-duration"] = "5s"
	e := newEnv(t, cfg)
	ip := testenv.ServiceIP(115)
	e.service("web", ip)
	old := e.served(ip)
	target := e.other(old)
	p := e.probe(ip)
	e.answersFrom(p, old)

	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	out, err := e.kubectlEip("move", ip.String(), target, "--timeout", "30s")
	e.must(err)
	assert.Assert(t, strings.HasPrefix(out, fmt.Sprintf("moved %s from %s to %s in ", ip, old, target)), "output %q", out)
	assert.Equal(t, e.served(ip), target)
	e.answersFrom(p, target)
	r := p.Stop()
	e.noTwoMACs(r)
	t.Logf("kubectl eip move from a killed holder: %q", strings.TrimSpace(out))
}

// handoverGap is the time between the last reply from one MAC and the
// first reply from the next: the gap the move caused, whatever else the
// probe saw before or after.
func handoverGap(r testenv.ProbeResult, from, to net.HardwareAddr) time.Duration {
	var last time.Time
	for _, rep := range r.Replies {
		switch {
		case bytes.Equal(rep.MAC, from):
			last = rep.At
		case bytes.Equal(rep.MAC, to) && !last.IsZero():
			return rep.At.Sub(last)
		}
	}
	return r.End.Sub(r.Start)
}

// Bad arguments and impossible moves fail with a clear message and a
// non-zero exit, and change nothing.
func TestPluginBadArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(113)
	e.service("web", ip)
	holder := e.served(ip)
	dead := e.other(holder)
	e.must(e.c.StopDaemon(dead, syscall.SIGKILL))
	gone := e.other(holder, dead)
	e.must(e.c.StopDaemon(gone, syscall.SIGTERM))
	unmanaged := testenv.ServiceIP(114)
	// A move asked before the plugin sees the killed node's heartbeat go
	// stale (a lease duration, or ten on slow heartbeats) is a move to a
	// node it still shows alive: the holder carries it out if it has not
	// judged that node dead yet. The cases begin once the plugin says so.
	testenv.Eventually(t, 2*settle, func() (bool, string) {
		for _, n := range e.pluginStatus().Nodes {
			if n.Name == dead {
				return !n.Alive, fmt.Sprintf("kubectl eip status shows %s dead: %+v", dead, n)
			}
		}
		return false, "no row for " + dead
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"move", "198.18.100", holder}, `error: "198.18.100" is not an IP address`},
		{[]string{"move", ip.String()}, "error: move takes an IP and a node, got 1 argument(s): kubectl eip move <ip> <node>"},
		{[]string{"move", unmanaged.String(), holder}, "error: " + unmanaged.String() + " is not managed by eip: no Service names it and it has no lock"},
		{[]string{"move", ip.String(), "no-such-node"}, `error: node "no-such-node" not found`},
		{[]string{"move", ip.String(), holder}, "error: " + ip.String() + " is already on " + holder},
		{[]string{"move", ip.String(), gone}, "error: " + gone + " does not run eip: no heartbeat eip-node-" + gone + " in namespace " + testenv.Namespace},
		{[]string{"move", ip.String(), dead}, "error: " + dead + " is not alive: its heartbeat was last renewed "},
		{[]string{"status", "-o", "xml"}, `error: unknown output format "xml": use wide, json or yaml`},
		{[]string{"status", unmanaged.String()}, "error: " + unmanaged.String() + " is not managed by eip"},
	} {
		e.eventually("kubectl eip "+strings.Join(tc.args, " "), func() (bool, string) {
			// The dead node's heartbeat goes stale a lease duration after the kill.
			_, err := e.kubectlEip(tc.args...)
			if err == nil {
				return false, "succeeded"
			}
			return strings.Contains(err.Error(), "exit status 1: "+tc.want), err.Error()
		})
	}
	assert.Equal(t, e.holder(ip), holder, "nothing moved")
	_, pending := e.lock(ip).Annotations[lease.AnnotationMoveTo]
	assert.Assert(t, !pending, "no move requested")
}

// kubectl eip version prints the plugin's build, then every node's eipd
// build as that eipd wrote it in its heartbeat: what `eipd --version` of
// the binary the nodes run prints.
func TestPluginVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	out, err := exec.Command(e.c.DaemonBin(), "--version").Output()
	e.must(err)
	eipd, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "eipd ")
	assert.Assert(t, ok && strings.Contains(eipd, " (commit "), "eipd --version printed %q", out)
	plugin, err := exec.Command(filepath.Join(e.pluginDir(), "kubectl-eip"), "--version").Output()
	e.must(err)

	got, err := e.kubectlEip("version")
	e.must(err)
	t.Logf("kubectl eip version:\n%s", got)
	want := string(plugin) + "NODE     EIPD\n"
	for _, n := range e.nodes {
		want += n + "   " + eipd + "\n"
	}
	assert.Equal(t, got, want)
}
