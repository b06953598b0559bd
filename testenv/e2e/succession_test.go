package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"github.com/eip-project/eip/internal/lease"
	"github.com/eip-project/eip/testenv"
)

// successionOf waits until ip is served and its lock names a successor, and
// returns the holder and the successor.
func (e *env) successionOf(ip netip.Addr) (holder, successor string) {
	e.t.Helper()
	holder = e.served(ip)
	e.eventually("the lock of "+ip.String()+" names a successor", func() (bool, string) {
		successor = e.lock(ip).Annotations[lease.AnnotationSuccessor]
		return successor != "" && successor != holder, "successor " + successor
	})
	return holder, successor
}

// watchedSuccession serves testenv.ServiceIP(n) from its holder, watched
// by a client probe answering from it, and returns the IP, its holder, its
// successor and the probe.
func (e *env) watchedSuccession(n int) (ip netip.Addr, holder, successor string, p *testenv.Probe) {
	e.t.Helper()
	ip = testenv.ServiceIP(n)
	e.service("web", ip)
	holder, successor = e.successionOf(ip)
	p = e.probe(ip)
	e.answersFrom(p, holder)
	return ip, holder, successor, p
}

// third is the node that is neither a nor b.
func (e *env) third(a, b string) string {
	for _, n := range e.nodes {
		if n != a && n != b {
			return n
		}
	}
	e.t.Fatalf("no third node besides %s and %s", a, b)
	return ""
}

// The holder dies and its successor, named in the lock, answers for the
// IP: it binds before its write, so the write is no longer on the path.
func TestSuccessorTakesOverAKilledHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip, old, next, p := e.watchedSuccession(60)

	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	killed := time.Now()
	assert.Equal(t, e.takenOver(ip, old, p), next, "the successor the lock named takes it")
	r := p.Stop()
	e.noTwoMACs(r)
	e.answeredWithin(r, next, killed, failoverBound, old+" killed")
	assert.DeepEqual(t, e.boundOn(ip), []string{next})
}

// The successor is cut off from the holder on the LAN, both ways, but not
// from the third node: it hears of the holder through the third node's
// reports and judges it alive, so nothing moves. When the holder is then
// killed, the successor, still deaf to it, takes the IP over once the
// third node's reports stop, and never while the holder answered.
func TestSuccessorCutOffFromTheHolderOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip, old, next, p := e.watchedSuccession(61)

	e.must(e.c.BlockUDP(e.ctx, next, livenessPort, true, true, old))
	t.Cleanup(func() { _ = e.c.UnblockUDP(e.ctx, next) })
	before := e.lockStates(ip)
	probes := map[netip.Addr]*testenv.Probe{ip: p}
	e.throughout(next+" cannot hear "+old+": nothing moves", 4*leaseDuration, func() string {
		if msg := e.stillAnswering(probes, map[netip.Addr]string{ip: old}, time.Second)(); msg != "" {
			return msg
		}
		if on := e.boundOn(ip); !slices.Equal(on, []string{old}) {
			return fmt.Sprintf("bound on %v", on)
		}
		return ""
	})
	e.assertNothingMoved(before, e.lockStates(ip))

	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	assert.Equal(t, e.takenOver(ip, old, p), next)
	r := p.Stop()
	e.noTwoMACs(r)
}

// The holder is alive but does not run (SIGSTOP, as a process starved of
// CPU): its peers judge it dead, but its kernel still answers for the IP.
// The successor writes the lock, but does not bind while the holder's MAC
// answers its probes. When the holder runs again it sees the lock name
// the successor and unbinds, and the successor binds at its next probe:
// one MAC at a time throughout.
func TestSuccessorWaitsForAHolderThatIsSlowButAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip, old, next, p := e.watchedSuccession(62)

	e.must(e.c.SignalDaemon(old, syscall.SIGSTOP))
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = e.c.SignalDaemon(old, syscall.SIGCONT)
		}
	})
	onlyOld := func() string {
		if on := e.boundOn(ip); !slices.Equal(on, []string{old}) {
			return fmt.Sprintf("bound on %v while %s's kernel answers", on, old)
		}
		if macs := p.Result().MACs(); len(macs) != 1 {
			return fmt.Sprintf("answered by %v", macs)
		}
		return ""
	}
	e.eventually("the successor writes the lock", func() (bool, string) {
		if msg := onlyOld(); msg != "" {
			e.t.Fatal(msg)
		}
		h := e.holder(ip)
		return h == next, "holder " + h
	})
	// The successor holds the lock now, and still must not bind.
	e.throughout(old+" stopped, its kernel answering", leaseDuration, onlyOld)

	e.must(e.c.SignalDaemon(old, syscall.SIGCONT))
	stopped = false
	e.answersFrom(p, next)
	e.eventually("only the successor has the address", func() (bool, string) {
		on := e.boundOn(ip)
		return slices.Equal(on, []string{next}), fmt.Sprint(on)
	})
	r := p.Stop()
	e.noTwoMACs(r)
	assert.Assert(t, e.c.DaemonRunning(old), "the holder runs on")
}

// The holder and its successor die together: the lock names a successor
// that is dead, so the race decides, and the third node takes the IP.
// (Alone, it hears no peer on the LAN and judges by the slow heartbeats:
// 20 s, as for any two of three nodes dying at once.)
func TestSuccessorDeadTooLeavesTheIPToTheRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip, old, next, p := e.watchedSuccession(63)
	third := e.third(old, next)

	e.must(e.c.StopDaemon(next, syscall.SIGKILL))
	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	assert.Equal(t, e.takenOver(ip, old, p), third)
	r := p.Stop()
	e.noTwoMACs(r)
	assert.DeepEqual(t, e.boundOn(ip), []string{third})
}

// Every daemon starts at once with 150 IPs to take, and one node is
// stopped while they are still being taken: gracefully, then in a second
// round killed. Every IP ends up bound on exactly the live node its lock
// names, and the client never hears two MACs for the IPs it watches.
func TestColdStartInterrupted(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			cfg := defaultConfig()
			cfg["max-ips-per-service"] = "off" // one Service names all 150
			e := newEnv(t, cfg)
			for _, n := range e.nodes {
				e.must(e.c.StopDaemon(n, syscall.SIGTERM))
			}
			ips := make([]netip.Addr, 150)
			for i := range ips {
				ips[i] = testenv.ServiceIP(100 + i)
			}
			e.service("web", ips...)
			var probes []*testenv.Probe
			for _, ip := range ips[:3] {
				probes = append(probes, e.probe(ip))
			}
			for _, n := range e.nodes {
				e.must(e.c.StartDaemon(n))
			}
			victim := e.nodes[0]
			e.eventually("the cold start under way", func() (bool, string) {
				bound := len(e.testAddrs(victim))
				return bound > 0, fmt.Sprintf("%d bound on %s", bound, victim)
			})
			e.must(e.c.StopDaemon(victim, sig))
			live := e.nodes[1:]
			e.eventually("every IP bound once, on the live node its lock names", func() (bool, string) {
				on := map[netip.Addr][]string{}
				for _, n := range e.nodes {
					for _, p := range e.testAddrs(n) {
						on[p.Addr()] = append(on[p.Addr()], n)
					}
				}
				for _, ip := range ips {
					h := e.holder(ip)
					if !slices.Contains(live, h) || !slices.Equal(on[ip], []string{h}) {
						return false, fmt.Sprintf("%s: holder %q, bound on %v", ip, h, on[ip])
					}
				}
				return true, ""
			})
			for _, p := range probes {
				e.noTwoMACs(p.Stop())
			}
		})
	}
}
