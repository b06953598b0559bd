package scripts

import (
	"os"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// TestKubeletMatchesControlPlane keeps the real-node kubelet (built by
// build-tool.sh kubelet) on the Kubernetes release of the API server it
// registers with (built by build-k8s.sh): both modules require the same
// k8s.io/kubernetes and pin every staging module to the same version.
func TestKubeletMatchesControlPlane(t *testing.T) {
	cp := kubernetesPins(t, "../testenv/k8s/go.mod")
	kubelet := kubernetesPins(t, "../testenv/tools/kubelet/go.mod")
	assert.Check(t, len(cp) > 1, "no k8s.io pins in testenv/k8s/go.mod: %v", cp)
	assert.Check(t, is.DeepEqual(kubelet, cp))
}

// kubernetesPins reads a go.mod's version of k8s.io/kubernetes and the
// k8s.io lines of its replace block, keyed by module path.
func kubernetesPins(t *testing.T, path string) map[string]string {
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	pins := map[string]string{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "k8s.io/kubernetes":
			pins[f[0]] = f[1]
		case len(f) == 4 && f[1] == "=>" && strings.HasPrefix(f[0], "k8s.io/"):
			pins[f[0]] = f[3]
		}
	}
	return pins
}
