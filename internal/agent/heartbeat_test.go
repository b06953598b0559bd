package agent

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	coordinationv1 "k8s.io/api/coordination/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eip-project/eip/internal/lease"
)

// lateServer is the harness's fake API server whose next Update is applied
// but answered with a timeout, as a loaded API server does.
type lateServer struct {
	*world
	late bool
}

func (l *lateServer) Update(ctx context.Context, ls *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	out, err := l.world.Update(ctx, ls)
	if l.late && err == nil {
		l.late = false
		return nil, context.DeadlineExceeded
	}
	return out, err
}

// A renewal that timed out but was applied makes the next one conflict:
// the heartbeater reads the heartbeat again and writes it, and says so
// without the warning kept for a heartbeat someone else changed.
func TestHeartbeatTimedOutRenewalApplied(t *testing.T) {
	w := newWorld(t, "node-a", defaultTestConfig())
	var logged bytes.Buffer
	srv := &lateServer{world: w}
	a := &Agent{opt: Options{Node: "node-a", Namespace: testNS, Leases: srv}, clk: clocktesting.NewFakeClock(t0),
		log: slog.New(slog.NewTextHandler(&logged, nil))}
	h := &heartbeater{a: a}
	r := renewal{duration: 2 * time.Second, timeout: time.Second}
	assert.NilError(t, h.renew(r))
	srv.late = true
	assert.ErrorIs(t, h.renew(r), context.DeadlineExceeded)
	assert.NilError(t, h.renew(r))
	assert.Assert(t, bytes.Contains(logged.Bytes(), []byte("level=INFO msg=\"a heartbeat renewal that failed was applied after all")), logged.String())
	assert.Assert(t, !bytes.Contains(logged.Bytes(), []byte("level=WARN")), logged.String())
	assert.Equal(t, len(w.renewals), 3, "%q", w.renewals)
	_, err := lease.ParseHeartbeat(w.get(lease.HeartbeatName("node-a")))
	assert.NilError(t, err)
}
