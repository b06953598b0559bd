package cli

import (
	"context"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/eip-project/eip/internal/lease"
)

func TestVersionCommand(t *testing.T) {
	current := heartbeat("node-1", now, true, "", 0)
	current.Annotations[lease.AnnotationBuild] = "v0.1.0 (commit 0bef168f1a2b, go1.26.0)"
	h := newHarness(t, []runtime.Object{current, heartbeat("node-2", now.Add(-time.Hour), true, "", 0), lock("198.18.100.1", "node-1", 0, now)}...)
	out, err := h.run(context.Background(), "version")
	assert.NilError(t, err)
	assert.Equal(t, out, `kubectl-eip v1.2.3
NODE     EIPD
node-1   v0.1.0 (commit 0bef168f1a2b, go1.26.0)
node-2   unknown
`)
}

func TestVersionClientOnly(t *testing.T) {
	h := newHarness(t) // no heartbeat: the API server is not asked
	out, err := h.run(context.Background(), "version", "--client")
	assert.NilError(t, err)
	assert.Equal(t, out, "kubectl-eip v1.2.3\n")
}

func TestVersionWithoutEip(t *testing.T) {
	h := newHarness(t)
	out, err := h.run(context.Background(), "version", "-n", "elsewhere")
	assert.Error(t, err, "no eipd heartbeat in namespace elsewhere: is eip installed there (-n names another)?")
	assert.Equal(t, out, "kubectl-eip v1.2.3\n")
}
