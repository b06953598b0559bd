package cli

import (
	"context"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// complete runs cobra's hidden __complete command, as the shell scripts
// and kubectl_complete-eip do, and returns its output lines.
func complete(t *testing.T, args ...string) string {
	t.Helper()
	h := newHarness(t, fixture()...)
	out, err := h.run(context.Background(), append([]string{"__complete"}, args...)...)
	assert.NilError(t, err)
	return out
}

func TestCompleteStatusOffersEveryIP(t *testing.T) {
	out := complete(t, "status", "198.18.100.1", "")
	assert.Equal(t, out, `198.18.0.11	refused
198.18.100.0	refused
198.18.100.2	bound on node-2
198.18.100.3	unbound on node-4
198.18.100.4	unbound
198.18.100.5	moving on node-1
198.18.100.6	conflict on node-2
198.18.100.9	orphan on node-2
198.18.200.1	out-of-range
2001:db8::100:1	bound on node-1
:4
`)
}

func TestCompleteMoveOffersMovableIPsThenNodes(t *testing.T) {
	assert.Equal(t, complete(t, "move", "198.18.100."), `198.18.100.1	bound on node-1
198.18.100.2	bound on node-2
198.18.100.3	unbound on node-4
198.18.100.5	moving on node-1
198.18.100.6	conflict on node-2
:4
`)
	// Live and eligible, not the holder: node-3 is cordoned, node-4 dead,
	// node-5 has an error, node-6 has no daemon, node-7 is excluded.
	assert.Equal(t, complete(t, "move", "198.18.100.1", ""), "node-2\talive, holds 3\n:4\n")
	assert.Equal(t, complete(t, "move", "198.18.100.3", ""), "node-1\talive, holds 3\nnode-2\talive, holds 3\n:4\n")
	assert.Equal(t, complete(t, "move", "198.18.100.1", "node-2", ""), ":4\n")
}

func TestCompleteStatusOutput(t *testing.T) {
	assert.Equal(t, complete(t, "status", "-o", ""), "wide\njson\nyaml\n:4\n")
}

// Each shell's script registers itself for kubectl-eip.
func TestCompletionScripts(t *testing.T) {
	for shell, registers := range map[string]string{
		"bash": "-F __start_kubectl-eip kubectl-eip\n",
		"zsh":  "#compdef kubectl-eip\n",
		"fish": "complete -c kubectl-eip -e\n",
	} {
		h := newHarness(t)
		out, err := h.run(context.Background(), "completion", shell)
		assert.NilError(t, err)
		assert.Check(t, strings.Contains(out, registers), "%s script lacks %q", shell, registers)
	}
}
