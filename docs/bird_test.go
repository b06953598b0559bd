package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// The BIRD 2 configuration operating.md shows for route mode is one BIRD
// accepts (bird -p parses it and exits).
func TestOperatingBirdConfigParses(t *testing.T) {
	if _, err := exec.LookPath("bird"); err != nil {
		t.Skip("bird not installed (scripts/prereqs.sh installs bird2)")
	}
	b, err := os.ReadFile("operating.md")
	assert.NilError(t, err)
	_, section, ok := strings.Cut(string(b), "## Route mode: the router's side")
	assert.Assert(t, ok, "operating.md has no route-mode router section")
	_, block, ok := strings.Cut(section, "\n```\n")
	assert.Assert(t, ok, "no code block in the route-mode router section")
	conf, _, ok := strings.Cut(block, "\n```\n")
	assert.Assert(t, ok && strings.Contains(conf, "passive on"), "%s", conf)
	path := filepath.Join(t.TempDir(), "bird.conf")
	assert.NilError(t, os.WriteFile(path, []byte(conf+"\n"), 0o644))
	out, err := exec.Command("bird", "-p", "-c", path).CombinedOutput()
	assert.NilError(t, err, "bird -p rejects operating.md's configuration: %s", out)
}
