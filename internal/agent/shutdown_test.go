package agent

import (
	"fmt"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
)

// A graceful stop hands every IP this node holds to a peer, whatever their
// number: more than the writers' queue holds at once too. Each IP is
// unbound before its hand-off is written, and none is left unbound without
// one (dark until peers judged this node dead).
func TestShutdownHandsOffEveryIP(t *testing.T) {
	const n = 5000
	w := newWorld(t, "node-a", defaultTestConfig())
	w.addNode("node-b")
	w.heartbeat("node-b", true)
	for i := range n {
		w.lock(testIP(i), "node-a")
		w.addService(fmt.Sprintf("svc-%d", i), testIP(i))
	}
	w.pass()
	for range 4 {
		w.tick("node-b")
	}
	w.take()
	assert.Equal(t, len(w.addrs), n, "bound before the stop")

	writes := shutdownAnswered(t, w)

	unbound := map[string]bool{}
	for _, c := range w.take() {
		if ip, ok := strings.CutPrefix(c, "unbind "); ok {
			unbound[ip] = true
		}
	}
	assert.Equal(t, len(unbound), n, "unbound at the stop")
	handed := map[string]bool{}
	for _, c := range writes {
		if name, ok := strings.CutPrefix(c, lease.Handoff.String()+" "); ok {
			handed[name] = true
		}
	}
	for i := range n {
		if !handed[leaseName(testIP(i))] {
			t.Fatalf("%d of %d IPs handed off; %s was unbound without a hand-off", len(handed), n, testIP(i))
		}
	}
}

// shutdownAnswered stops w's loop (shutdown) with the heartbeat writer and
// the lock writers as goroutines, each write answered at once, and returns
// the lock writes made, as "ACTION NAME". The loop blocks on them during a
// stop. They touch the world only while the loop waits for their answer (a
// renewal); a lock write is answered without it.
func shutdownAnswered(t *testing.T, w *world) []string {
	t.Helper()
	stop, written := make(chan struct{}), make(chan []string)
	go func() {
		var out []string
		for {
			select {
			case r := <-w.s.hbLine.req:
				sent := w.clk.Now()
				w.s.hbLine.res <- renewResult{renewal: r, sent: sent, err: w.s.hb.renew(r)}
			case j := <-w.s.writes.jobs:
				l := j.lease.DeepCopy()
				l.ResourceVersion = "x" + j.name
				out = append(out, fmt.Sprintf("%s %s", j.action, j.name))
				w.s.writes.results <- writeResult{write: j, out: l}
			case <-stop:
				written <- out
				return
			}
		}
	}()
	assert.NilError(t, w.s.shutdown())
	close(stop)
	return <-written
}
