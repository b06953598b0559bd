package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/golden"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A manifest with problems: each is printed at its file and line, with the
// fix, and the command fails; a password is never printed.
func TestConfigCheckFile(t *testing.T) {
	h := newHarness(t)
	out, err := h.run(context.Background(), "config", "check", "-f", filepath.Join("testdata", "config-check.yaml"))
	assert.ErrorContains(t, err, "testdata/config-check.yaml: 6 problems")
	golden.Assert(t, out, "config-check.golden")
	assert.Check(t, !strings.Contains(out, "s3cret"))
}

// The shipped ConfigMap, read from standard input, is valid.
func TestConfigCheckShippedFromStdin(t *testing.T) {
	h := newHarness(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "configmap.yaml"))
	assert.NilError(t, err)
	h.env.In = bytes.NewReader(b)
	out, err := h.run(context.Background(), "config", "check", "-f", "-")
	assert.NilError(t, err)
	assert.Equal(t, out, "<stdin>: valid\n")
}

// Without -f, the cluster's ConfigMap is checked, in the namespace of -n.
func TestConfigCheckCluster(t *testing.T) {
	bad := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: DefaultConfigMap, Namespace: "edge"},
		Data:       map[string]string{"policy": "bogus", "ranges": "198.18.100.0/24\n127.0.0.0/30"},
	}
	h := newHarness(t, bad)
	out, err := h.run(context.Background(), "config", "check", "-n", "edge")
	assert.ErrorContains(t, err, "edge/eip-config: 2 problems")
	golden.Assert(t, out, "config-check-cluster.golden")

	h = newHarness(t, fixture()...)
	out, err = h.run(context.Background(), "config", "check")
	assert.NilError(t, err)
	assert.Equal(t, out, "eip-system/eip-config: valid\n")

	_, err = h.run(context.Background(), "config", "check", "-n", "elsewhere")
	assert.ErrorContains(t, err, `read ConfigMap elsewhere/eip-config: configmaps "eip-config" not found`)
}

// A manifest without the ConfigMap, or with a value that is no string, is
// an error that says so.
func TestConfigCheckBadManifest(t *testing.T) {
	for _, tc := range []struct{ manifest, err string }{
		{"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n", "<stdin> holds no ConfigMap named eip-config (see --config-map)"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: eip-config\ndata:\n  netmask: 24\n", "<stdin>:6: data.netmask is not a string: quote it"},
		{"kind: [", "read <stdin>: yaml:"},
	} {
		h := newHarness(t)
		h.env.In = strings.NewReader(tc.manifest)
		_, err := h.run(context.Background(), "config", "check", "-f", "-")
		assert.Check(t, is.ErrorContains(err, tc.err))
	}
}
