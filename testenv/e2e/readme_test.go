package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"github.com/eip-project/eip/testenv"
)

// readmeCoverage says, for every command of README.md's sh blocks, how it
// is run: by this test (check runs the README's line, with the
// substitutions how names), or by a test or script elsewhere (check reads
// that file and fails when it no longer does so). A README command missing here fails
// TestREADMECommands, so every new one needs a line.
type readmeCoverage struct {
	how   string
	check func(r *readme, t *testing.T, line string)
}

// readme is the state the checks share, in the README's order.
type readme struct {
	e    *env
	root string
	tmp  string
}

func readmeCommands() map[string]readmeCoverage {
	return map[string]readmeCoverage{
		"make demo": {
			how:   "run here as written: its own cluster, a Service, pings, a failover and a move",
			check: (*readme).demo,
		},
		"make demo-bgp": {
			how:   "run here as written: its own cluster with the BIRD router, a Service in a BGP range, a failover and a move through the router",
			check: (*readme).demoBGP,
		},
		"make demo-cluster": {
			how:   "run here as written: real kubelet nodes, eip from make image and manifests/, HTTP and pings through a rollout restart",
			check: (*readme).demoCluster,
		},
		"make test": {
			how:   "what CI runs: .ci/run ends with `exec make test`",
			check: ranBy(".ci/run", "\nexec make test\n"),
		},
		"make lint": {
			how:   "a prerequisite of `make test`, which CI runs",
			check: ranBy("Makefile", "\ntest: prereqs lint build\n"),
		},
		"make image": {
			how:   "run here with OUT=<temp dir>/eipd-image.tar, so bin/eipd-image.tar is left alone",
			check: (*readme).image,
		},
		"helm install eip charts/eip --set image.repository=REGISTRY/eipd,image.tag=TAG --set-string config.ranges='192.0.2.240/28 auto-assign'": {
			how:   "TestHelmInstallUpgradeUninstall runs it as written on an empty control plane of its own, then upgrades and uninstalls: nothing is left",
			check: ranBy("testenv/e2e/helm_test.go", `readmeLine(t, "helm install eip charts/eip ")`),
		},
		"make release": {
			how:   "TestKrewInstallsThePlugin runs it as written, validates bin/release/krew/eip.yaml with validate-krew-manifest and installs every archive with krew",
			check: ranBy("testenv/e2e/krew_test.go", `readmeLine(t, "make release")`),
		},
		"kubectl krew install --manifest=bin/release/krew/eip.yaml --archive=bin/release/kubectl-eip_linux_amd64.tar.gz": {
			how:   "TestKrewInstallsThePlugin runs it as written with a real krew and KREW_ROOT in a temporary directory",
			check: ranBy("testenv/e2e/krew_test.go", `readmeLine(t, "kubectl krew install ")`),
		},
		"make install": {
			how:   "run here with PREFIX=<temp dir>; then `kubectl eip status` runs from that PATH against the test cluster",
			check: (*readme).makeInstall,
		},
		"make build": {
			how:   "run here as written",
			check: (*readme).build,
		},
		"bin/eipd --kubeconfig ~/.kube/config --node-name $(hostname)": {
			how:   "how testenv starts every eipd (Cluster.StartDaemon with DaemonArgs: $EIPD_BIN, default bin/eipd, --kubeconfig=<node kubeconfig> --node-name=<node>); newEnv starts it on every node, here too",
			check: (*readme).daemonArgs,
		},
		"make bench": {
			how:   "the Makefile's `bench: prereqs build` then scripts/bench.sh; run here as `scripts/bench.sh -only bind -bind-reps 3 -out <temp dir>`: the same script, benchmark and cluster, one scenario, three samples",
			check: (*readme).bench,
		},
	}
}

// TestREADMECommands runs, or finds what runs, every command README.md
// shows in its sh blocks, but those of the blocks marked for the install
// test, which runs them verbatim as a release's user would.
func TestREADMECommands(t *testing.T) {
	t.Parallel()
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	assert.NilError(t, err)
	cmds := shCommands(withoutInstallTestBlocks(string(b)))
	assert.Assert(t, len(cmds) > 0, "no commands in README.md's sh blocks")
	table := readmeCommands()
	missing, stale := readmeGaps(cmds, table)
	for _, c := range missing {
		t.Errorf("README.md command %q is in no row of readmeCommands: run it in this test or name what runs it", c)
	}
	for _, c := range stale {
		t.Errorf("readmeCommands has a row for %q, which README.md no longer shows", c)
	}
	if t.Failed() {
		return
	}

	r := &readme{e: newEnv(t, defaultConfig()), root: root, tmp: t.TempDir()}
	for _, c := range cmds {
		cov := table[c]
		t.Run(c, func(t *testing.T) {
			t.Logf("%s: %s", c, cov.how)
			cov.check(r, t, c)
		})
	}
}

// readmeGaps returns the README commands the table has no row for, and
// the rows for commands the README no longer shows, each sorted.
func readmeGaps(cmds []string, table map[string]readmeCoverage) (missing, stale []string) {
	for _, c := range cmds {
		if _, ok := table[c]; !ok {
			missing = append(missing, c)
		}
	}
	for c := range table {
		if !slices.Contains(cmds, c) {
			stale = append(stale, c)
		}
	}
	slices.Sort(missing)
	slices.Sort(stale)
	return missing, stale
}

func TestREADMEGaps(t *testing.T) {
	t.Parallel()
	table := map[string]readmeCoverage{"make a": {}, "make gone": {}}
	missing, stale := readmeGaps([]string{"make a", "make new"}, table)
	assert.DeepEqual(t, missing, []string{"make new"})
	assert.DeepEqual(t, stale, []string{"make gone"})
}

// installTestMarker starts the HTML comment that marks, on the line before
// its fence, a README block the install test runs verbatim:
// <!-- readme-test: NAME -->.
const installTestMarker = "<!-- readme-test: "

// withoutInstallTestBlocks returns md without the fenced blocks marked
// with installTestMarker.
func withoutInstallTestBlocks(md string) string {
	var out []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], installTestMarker) || i+1 == len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			out = append(out, lines[i])
			continue
		}
		for i += 2; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
		}
	}
	return strings.Join(out, "\n")
}

func TestWithoutInstallTestBlocks(t *testing.T) {
	t.Parallel()
	md := "```sh\nmake a\n```\n" + installTestMarker + "x -->\n```sh\nhelm install x\n```\n" +
		installTestMarker + "y -->\ntext, not a block\n```sh\nmake b\n```\n"
	assert.DeepEqual(t, shCommands(withoutInstallTestBlocks(md)), []string{"make a", "make b"})
}

// shCommands returns each command line of the ```sh blocks of a Markdown
// text, in order and once each, without shell comments; lines ending in a
// backslash are joined.
func shCommands(md string) []string {
	var cmds []string
	seen := map[string]bool{}
	in := false
	var cont string
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			in = !in && strings.TrimSpace(strings.TrimPrefix(line, "```")) == "sh"
			continue
		}
		if !in {
			continue
		}
		line = cont + line
		cont = ""
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		c := strings.TrimSpace(stripComment(line))
		if c != "" && !seen[c] {
			seen[c] = true
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// stripComment cuts a shell comment: a # outside quotes that starts a word.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

func TestShCommands(t *testing.T) {
	t.Parallel()
	md := "text\n```sh\nmake a   # a comment\n# only a comment\n\nsed 's#x#y#' f | wc -l\nlong \\\n  line\nmake a\n```\n" +
		"```\nnot sh\n```\n```sh\necho \"# kept\" # cut\n```\n"
	assert.DeepEqual(t, shCommands(md), []string{"make a", "sed 's#x#y#' f | wc -l", "long   line", `echo "# kept"`})
}

// ranBy checks that path (relative to the repository root) contains want:
// that the test or script named there still runs the command.
func ranBy(path, want string) func(*readme, *testing.T, string) {
	return func(r *readme, t *testing.T, _ string) {
		b, err := os.ReadFile(filepath.Join(r.root, path))
		assert.NilError(t, err)
		assert.Check(t, is.Contains(string(b), want), "%s no longer runs it", path)
	}
}

// host runs a README command line with bash in the repository root on the
// host, with extra environment, and returns its combined output.
func (r *readme) host(t *testing.T, timeout time.Duration, line string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, "%s %s:\n%s", strings.Join(env, " "), line, out)
	t.Logf("%s took %s", line, time.Since(start).Round(100*time.Millisecond))
	return string(out)
}

// client runs a README command line with bash from the client namespace,
// as an operator on the LAN would: kubectl (and whatever pathPrefix holds)
// on PATH, KUBECONFIG naming the test cluster's admin kubeconfig.
func (r *readme) client(t *testing.T, line, pathPrefix string) string {
	t.Helper()
	path := filepath.Dir(r.e.c.KubectlPath()) + ":/usr/local/bin:/usr/bin:/bin"
	if pathPrefix != "" {
		path = pathPrefix + ":" + path
	}
	out, err := r.e.c.Exec(r.e.ctx, testenv.Client, "env", "PATH="+path, "KUBECONFIG="+r.e.c.AdminKubeconfig(),
		"bash", "-o", "pipefail", "-c", "cd "+r.root+" && "+line+" 2>&1")
	assert.NilError(t, err, "%s:\n%s", line, out)
	return string(out)
}

func (r *readme) demo(t *testing.T, line string) {
	out := r.host(t, 10*time.Minute, line)
	for _, want := range []string{"failover: ", "\nmoved 198.18.100.2 from ", "==> tearing everything down"} {
		assert.Check(t, is.Contains(out, want))
	}
}

func (r *readme) demoBGP(t *testing.T, line string) {
	out := r.host(t, 10*time.Minute, line)
	for _, want := range []string{"BGP.med: ", "failover: ", "the router still lists ", "\nmoved 198.19.100.1 from ", "==> tearing everything down"} {
		assert.Check(t, is.Contains(out, want))
	}
}

func (r *readme) demoCluster(t *testing.T, line string) {
	out := r.host(t, 15*time.Minute, line)
	for _, want := range []string{"==> eipd Ready on every node after ", " answers from ", "==> tearing down"} {
		assert.Check(t, is.Contains(out, want))
	}
	assert.Check(t, !strings.Contains(out, "two MACs answered"), "%s", out)
}

func (r *readme) image(t *testing.T, line string) {
	tar := filepath.Join(r.tmp, "eipd-image.tar")
	out := r.host(t, 15*time.Minute, line, "OUT="+tar)
	st, err := os.Stat(tar)
	assert.NilError(t, err)
	assert.Check(t, st.Size() > 1<<20, "%s is %d bytes", tar, st.Size())
	for _, want := range []string{"verified", "linux/amd64", "linux/arm64"} {
		assert.Check(t, is.Contains(out, want))
	}
}

func (r *readme) makeInstall(t *testing.T, line string) {
	prefix := filepath.Join(r.tmp, "prefix")
	assert.NilError(t, os.MkdirAll(filepath.Join(prefix, "bin"), 0o755))
	r.host(t, 10*time.Minute, line+" PREFIX="+prefix)
	for _, bin := range []string{"kubectl-eip", "kubectl_complete-eip", "eipd"} {
		st, err := os.Stat(filepath.Join(prefix, "bin", bin))
		assert.NilError(t, err)
		assert.Check(t, st.Mode()&0o111 != 0, "%s is not executable", bin)
	}
	ip := testenv.ServiceIP(120)
	r.e.service("readme", ip)
	r.e.served(ip)
	out := r.client(t, "kubectl eip status", filepath.Join(prefix, "bin"))
	t.Logf("kubectl eip status:\n%s", out)
	for _, want := range append([]string{"NODE", ip.String()}, r.e.nodes...) {
		assert.Check(t, is.Contains(out, want))
	}
}

func (r *readme) build(t *testing.T, line string) {
	r.host(t, 10*time.Minute, line)
	for _, bin := range []string{"eipd", "kubectl-eip"} {
		_, err := os.Stat(filepath.Join(r.root, "bin", bin))
		assert.Check(t, err)
	}
}

// daemonArgs checks that testenv starts eipd with the flags the README
// shows, so the daemons of every e2e test (and this one's, which served
// the IP above) run that command.
func (r *readme) daemonArgs(t *testing.T, _ string) {
	node := r.e.nodes[0]
	args := r.e.c.DaemonArgs(node)
	assert.Check(t, is.Contains(args, "--kubeconfig="+r.e.c.NodeKubeconfig(node)))
	assert.Check(t, is.Contains(args, "--node-name="+node))
	assert.Check(t, r.e.c.DaemonRunning(node), "newEnv started eipd on %s", node)
}

func (r *readme) bench(t *testing.T, line string) {
	ranBy("Makefile", "\nbench: prereqs build\n\tscripts/bench.sh\n")(r, t, line)
	dir := filepath.Join(r.tmp, "bench")
	r.host(t, 10*time.Minute, "scripts/bench.sh -only bind -bind-reps 3 -out "+dir)
	b, err := os.ReadFile(filepath.Join(dir, "table.txt"))
	assert.NilError(t, err)
	assert.Check(t, regexp.MustCompile(`(?m)^Service created → IP answering pings +3 `).Match(b), "table.txt:\n%s", b)
	for _, f := range []string{"results.json", "bench.svg"} {
		_, err := os.Stat(filepath.Join(dir, f))
		assert.Check(t, err)
	}
}
