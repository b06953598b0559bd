package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"github.com/eip-project/eip/testenv"
)

// complete asks kubectl for the completions of `kubectl eip WORDS`, as a
// shell's kubectl completion does (kubectl __complete), from the client
// namespace with kubectl-eip and kubectl_complete-eip on PATH: kubectl
// finds the plugin, runs kubectl_complete-eip with the words, which asks
// kubectl-eip's __complete. It returns the choices without descriptions.
func (e *env) complete(dir string, words ...string) []string {
	e.t.Helper()
	args := append([]string{"env", "PATH=" + dir + ":/usr/local/bin:/usr/bin:/bin", "KUBECONFIG=" + e.c.AdminKubeconfig(),
		e.c.KubectlPath(), "__complete", "eip"}, words...)
	out, err := e.c.Exec(e.ctx, testenv.Client, args...)
	e.must(err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	assert.Assert(e.t, len(lines) > 0 && strings.HasPrefix(lines[len(lines)-1], ":"), "no directive in %q", out)
	assert.Check(e.t, is.Equal(lines[len(lines)-1], ":4"), "completion failed or offered files: %q", out)
	var choices []string
	for _, l := range lines[:len(lines)-1] {
		choice, _, _ := strings.Cut(l, "\t")
		choices = append(choices, choice)
	}
	return choices
}

// `kubectl eip <TAB>` completes through kubectl's plugin completion from
// the cluster's data: status offers every IP the Services and locks name,
// move only the IPs it can move, then the live nodes other than the holder.
func TestCompletionThroughKubectl(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(122)
	outside := netip.MustParseAddr("198.18.200.9")
	e.service("complete", ip, outside)
	holder := e.served(ip)

	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	dir := e.pluginDir()
	assert.NilError(t, os.Symlink(filepath.Join(root, "kubectl-eip", "kubectl_complete-eip"), filepath.Join(dir, "kubectl_complete-eip")))

	assert.Check(t, slices.Contains(e.complete(dir, ""), "status"), "subcommands")
	assert.DeepEqual(t, e.complete(dir, "status", ""), []string{ip.String(), outside.String()})
	assert.DeepEqual(t, e.complete(dir, "status", "198.18.2"), []string{outside.String()})
	assert.DeepEqual(t, e.complete(dir, "move", ""), []string{ip.String()})
	var others []string
	for _, n := range e.nodes {
		if n != holder {
			others = append(others, n)
		}
	}
	assert.DeepEqual(t, e.complete(dir, "move", ip.String(), ""), others)

	// A node whose eipd stopped is no longer offered.
	e.must(e.c.StopDaemon(others[0], syscall.SIGKILL))
	e.eventually(others[0]+" is no longer offered", func() (bool, string) {
		got := e.complete(dir, "move", ip.String(), "")
		return slices.Equal(got, others[1:]), strings.Join(got, " ")
	})
}
