package cli

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/golden"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/eip-project/eip/internal/lease"
)

// answerChecks makes the named nodes answer every check request written
// into their heartbeat at once, as their eipd does once it checked every
// IP it checks.
func answerChecks(h *harness, nodes ...string) {
	h.client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		for _, n := range nodes {
			if l.Name == lease.HeartbeatName(n) && l.Annotations[lease.AnnotationCheckRequest] != "" {
				l.Annotations[lease.AnnotationCheckDone] = l.Annotations[lease.AnnotationCheckRequest]
			}
		}
		return false, nil, nil // on to the API server's rules (strictLeases)
	})
}

func TestCheckHealthy(t *testing.T) {
	h := newHarness(t, fixture()...)
	answerChecks(h, "node-1")
	out, err := h.run(context.Background(), "check", "198.18.100.2")
	assert.NilError(t, err)
	golden.Assert(t, out, "check-healthy.golden")
	hb, err := h.client.CoordinationV1().Leases(ns).Get(context.Background(), lease.HeartbeatName("node-1"), metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Assert(t, hb.Annotations[lease.AnnotationCheckRequest] != "", "the request was written")
	other, err := h.client.CoordinationV1().Leases(ns).Get(context.Background(), lease.HeartbeatName("node-2"), metav1.GetOptions{})
	assert.NilError(t, err)
	assert.Equal(t, other.Annotations[lease.AnnotationCheckRequest], "", "only the IP's checker is asked")
}

func TestCheckNamesWhatIsNotAnswered(t *testing.T) {
	h := newHarness(t, fixture()...)
	answerChecks(h, "node-1", "node-2")
	out, err := h.run(context.Background(), "check")
	golden.Assert(t, out, "check-broken.golden")
	assert.ErrorContains(t, err, "not answered by their holder alone")
	for _, want := range []string{
		"198.18.100.1: two-macs as node-2 hears it (answered by [02:00:00:00:00:01 02:ee:00:00:00:02])",
		"198.18.100.3: state unbound",
		"198.18.100.6: state conflict",
		"2001:db8::100:1: none as node-2 hears it",
	} {
		assert.ErrorContains(t, err, want)
	}
	assert.Assert(t, !strings.Contains(err.Error(), "198.18.100.2:"), "198.18.100.2 is answered by its holder: %v", err)
}

func TestCheckWaitsForTheCheckers(t *testing.T) {
	h := newHarness(t, fixture()...)
	answerChecks(h, "node-1") // node-2 runs an eipd that does not answer
	done := make(chan error, 1)
	go func() {
		_, err := h.run(context.Background(), "check", "--timeout", "5s")
		done <- err
	}()
	for {
		select {
		case err := <-done:
			assert.ErrorContains(t, err, "no fresh check from [node-2] within 5s")
			assert.Equal(t, h.out.String(), "", "no verdicts without a fresh check")
			return
		default:
		}
		if h.clock.HasWaiters() {
			h.clock.Step(time.Second)
		}
		runtime.Gosched() // the command runs meanwhile; only the fake clock tells time
	}
}

func TestCheckArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "198.18.100"}, `"198.18.100" is not an IP address`},
		{[]string{"check", "--timeout", "0s"}, "--timeout must be positive, not 0s"},
		{[]string{"check", "198.18.100.77"}, "198.18.100.77 is not managed by eip"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			h := newHarness(t, fixture()...)
			_, err := h.run(context.Background(), tc.args...)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
