package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/eip-project/eip/testenv"
)

// goneMovesAtOnce serves an IP from its holder, watched by the client,
// and puts the holder's Node out of service with kubectl (gone, whose undo
// the test's cleanup runs): either while the holder's eipd keeps running
// and renewing, or (dead) just after it was killed, as when the node went
// down. The client must be answered from the IP's successor within a
// second, never by two MACs: without waiting for the holder's heartbeat
// to expire, which a running eipd never lets happen, and which takes a
// lease duration (2 s here) after a death.
func (e *env) goneMovesAtOnce(n int, what string, dead bool, gone func(node string) (undo func() error)) {
	e.t.Helper()
	ip := testenv.ServiceIP(n)
	e.service(fmt.Sprintf("gone-%d", n), ip)
	holder, successor := e.successionOf(ip)
	p := e.probe(ip)
	e.answersFrom(p, holder)
	at := time.Now()
	if dead {
		e.must(e.c.StopDaemon(holder, syscall.SIGKILL))
	}
	undo := gone(holder)
	e.t.Cleanup(func() {
		if err := undo(); err != nil {
			e.t.Errorf("undo %s of %s: %v", what, holder, err)
		}
	})
	e.answersFrom(p, successor)
	// The target: a second, less than the lease duration a death alone
	// takes to be judged.
	e.answeredWithin(p.Result(), successor, at, time.Second, fmt.Sprintf("%s, holder %s %s", ip, holder, what))
	assert.Equal(e.t, e.c.DaemonRunning(holder), !dead)
	e.eventually("the lock names "+successor, func() (bool, string) {
		h := e.holder(ip)
		return h == successor, "held by " + h
	})
	assert.DeepEqual(e.t, e.boundOn(ip), []string{successor})
	e.noTwoMACs(p.Stop())
}

// kubectl runs kubectl against the test cluster's API server.
func (e *env) kubectl(args ...string) error {
	out, err := e.c.Kubectl(context.Background(), args...)
	if err != nil {
		return fmt.Errorf("kubectl %v: %w: %s", args, err, out)
	}
	return nil
}

// taint puts node out of service as an operator does after shutting it
// down without a drain, and returns the undo.
func (e *env) taintOutOfService(node string) func() error {
	e.must(e.kubectl("taint", "node", node, corev1.TaintNodeOutOfService+"=nodeshutdown:NoExecute"))
	return func() error { return e.kubectl("taint", "node", node, corev1.TaintNodeOutOfService+"-") }
}

// deleteNode deletes Node node and returns the undo: its kubelet
// registering it again.
func (e *env) deleteNode(node string) func() error {
	e.must(e.kubectl("delete", "node", node))
	return func() error { return e.c.RegisterNode(context.Background(), node) }
}

// The holder's Node is tainted node.kubernetes.io/out-of-service while its
// eipd still runs, and, in another cluster, just after its eipd died: the
// IP moves to its successor at once either way.
func TestNodeOutOfServiceLosesItsIPsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.goneMovesAtOnce(205, "tainted out-of-service", false, e.taintOutOfService)
	e.goneMovesAtOnce(207, "killed and tainted out-of-service", true, e.taintOutOfService)
}

// The holder's Node is deleted while its eipd still runs, and just after
// its eipd died: the IP moves to its successor at once either way.
func TestNodeDeletedLosesItsIPsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	e.goneMovesAtOnce(206, "deleted", false, e.deleteNode)
	e.goneMovesAtOnce(208, "killed and deleted", true, e.deleteNode)
}
