package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
)

// TestToolBinDir builds a one-command tool with scripts/build-tool.sh in a
// scratch tree and checks that ToolBinDir names the directory the script
// printed and that the binary is there; a second run must be a no-op.
func TestToolBinDir(t *testing.T) {
	root, err := RepoRoot()
	assert.NilError(t, err)
	tree := t.TempDir()
	files := map[string]string{
		"scripts/build-tool.sh":                 "", // copied below
		"testenv/tools/hello/go.mod":            "module example.com/hello\n\ngo 1.26.0\n",
		"testenv/tools/hello/build.env":         "PACKAGES=./cmd/hello\nLDFLAGS=\"-X main.greeting=hi\"\n",
		"testenv/tools/hello/cmd/hello/main.go": "package main\n\nvar greeting = \"unset\"\n\nfunc main() { println(greeting) }\n",
	}
	script, err := os.ReadFile(filepath.Join(root, "scripts", "build-tool.sh"))
	assert.NilError(t, err)
	files["scripts/build-tool.sh"] = string(script)
	for name, body := range files {
		p := filepath.Join(tree, name)
		assert.NilError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		assert.NilError(t, os.WriteFile(p, []byte(body), 0o755))
	}
	cache := t.TempDir()
	t.Setenv("EIP_CACHE", cache)
	build := func() (dir, stderr string) {
		cmd := exec.Command(filepath.Join(tree, "scripts", "build-tool.sh"), "hello")
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		assert.NilError(t, err, errb.String())
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1], errb.String()
	}
	dir, stderr := build()
	assert.Assert(t, strings.Contains(stderr, "building hello"), stderr)
	want, err := ToolBinDir(tree, "hello")
	assert.NilError(t, err)
	assert.Equal(t, dir, want)
	out, err := exec.Command(filepath.Join(dir, "hello")).CombinedOutput()
	assert.NilError(t, err)
	assert.Equal(t, strings.TrimSpace(string(out)), "hi")

	again, stderr := build()
	assert.Equal(t, again, dir)
	assert.Equal(t, stderr, "", "a cached tool is not rebuilt")
}
