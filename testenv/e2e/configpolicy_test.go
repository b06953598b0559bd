package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/eip-project/eip/internal/config/configtest"
	"github.com/eip-project/eip/testenv"
)

// The shipped admission policy for eip-config (manifests/config-policy.yaml),
// on the real API server: `kubectl apply` of each invalid configuration of
// the table the parser's tests also read is refused with the problem
// named, and each valid one is stored. No eipd runs: this is the API
// server's judgement alone.
func TestConfigPolicyRefusesWhatTheParserRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cluster := lender.get(t)
	table, err := configtest.Read()
	assert.NilError(t, err)
	root, err := testenv.RepoRoot()
	assert.NilError(t, err)
	policy := filepath.Join(root, "manifests", "config-policy.yaml")
	out, err := cluster.Kubectl(ctx, "apply", "--server-side", "--field-manager=eip-e2e", "--validate=strict", "-f", policy)
	assert.NilError(t, err, "%s", out)
	t.Cleanup(func() {
		if out, err := cluster.Kubectl(context.Background(), "delete", "--ignore-not-found", "-f", policy); err != nil {
			t.Errorf("delete the policy: %v\n%s", err, out)
		}
	})

	dir := t.TempDir()
	apply := func(data map[string]string, flags ...string) (string, error) {
		cm := corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: testenv.ConfigMap, Namespace: testenv.Namespace},
			Data:       data,
		}
		b, err := yaml.Marshal(cm)
		assert.NilError(t, err)
		file := filepath.Join(dir, "eip-config.yaml")
		assert.NilError(t, os.WriteFile(file, b, 0o644))
		out, err := cluster.Kubectl(ctx, append([]string{"apply", "-f", file}, flags...)...)
		if err != nil {
			// The refusal is on kubectl's standard error, which err holds.
			return string(out) + err.Error(), err
		}
		return string(out), nil
	}
	// The API server compiles a new policy in the background: wait until it
	// refuses the first invalid configuration, in dry runs, so that none is
	// stored meanwhile.
	first := table.Invalid[0]
	testenv.Eventually(t, settle, func() (bool, string) {
		out, err := apply(first.Data, "--dry-run=server")
		return err != nil, "policy not in force yet: " + out
	})

	for _, c := range table.Valid {
		out, err := apply(c.Data)
		assert.Check(t, err == nil, "valid %q refused: %s", c.Name, out)
	}
	for _, c := range table.Invalid {
		out, err := apply(c.Data)
		if !assert.Check(t, err != nil, "invalid %q accepted: %s", c.Name, out) {
			continue
		}
		assert.Check(t, strings.Contains(out, `ValidatingAdmissionPolicy 'eip-config'`), "%q: %s", c.Name, out)
		assert.Check(t, strings.Contains(out, c.Problem), "%q: %s\nwant %s", c.Name, out, c.Problem)
	}
}
