package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lanlive"
	"github.com/eip-project/eip/testenv"
)

// An attacker on the LAN records liveness datagrams off the wire and sends
// them again from the sender's address (docs/design.md, Replayed
// datagrams). Nothing it sends may move an IP or delay a failover.

// captured records what node sends on the liveness port until keep says
// it has enough, or settle passes.
func (e *env) captured(node string, keep func(c testenv.Captured, d lanlive.Datagram) (done bool)) {
	e.t.Helper()
	capt, err := e.c.CaptureUDP(node, livenessPort)
	e.must(err)
	defer capt.Close()
	deadline := time.Now().Add(settle)
	for {
		c, err := capt.Next(deadline)
		e.must(err)
		if len(c.Payload) < sha256.Size {
			continue
		}
		d, err := lanlive.Decode(c.Payload[sha256.Size:])
		e.must(err)
		if keep(c, d) {
			return
		}
	}
}

// replay sends the captured datagrams again, in turn, one every gap, from
// the socket until stop is closed; it closes done when it returns.
func replay(conn *net.UDPConn, dgs []testenv.Captured, gap time.Duration, stop <-chan struct{}, done chan<- int) {
	sent := 0
	t := time.NewTicker(gap)
	defer t.Stop()
	for {
		c := dgs[sent%len(dgs)]
		if _, err := conn.WriteToUDPAddrPort(c.Payload, c.To); err == nil {
			sent++
		}
		select {
		case <-stop:
			done <- sent
			return
		case <-t.C:
		}
	}
}

// A peer's datagrams to a third node that do not list the holder, replayed
// to the holder from the peer's address, read as that peer's reports that
// it no longer hears the holder. They move nothing: the holder keeps its
// IP, answering throughout, and says it was not heard nowhere. (Two such
// replays 300 ms apart made a holder judge itself unheard and hand every
// IP it held away.)
func TestLANReplayedUnheardMovesNothing(t *testing.T) {
	t.Parallel()
	// Every cluster's nodes are node-1, node-2 and node-3.
	victim, peer, third := "node-1", "node-2", "node-3"
	cfg := defaultConfig()
	cfg["preferred-nodes"] = victim
	e := newEnv(t, cfg)
	// The victim's eipd stops; the peer's datagrams to the third node
	// soon list the victim no more (after two lease durations).
	e.must(e.c.StopDaemon(victim, syscall.SIGKILL))
	nodes := e.c.Nodes()
	var recorded []testenv.Captured
	thirdAddr := netip.AddrPortFrom(nodes[2].IPv4, livenessPort)
	e.captured(peer, func(c testenv.Captured, d lanlive.Datagram) bool {
		_, listsVictim := d.Ages[victim]
		if c.To == thirdAddr && !listsVictim {
			recorded = append(recorded, c)
		}
		return len(recorded) == 4
	})
	for i := range recorded {
		recorded[i].To = netip.AddrPortFrom(nodes[0].IPv4, livenessPort)
	}
	e.start(victim)
	ip := testenv.ServiceIP(143)
	// Until its peers count the victim live again, another node may take
	// the IP first, and preferred-nodes then moves it to the victim: the
	// replays begin once the victim serves it.
	lan := e.onLAN(ip)
	lan.serve = func(ip netip.Addr) string {
		var holder string
		e.eventually(ip.String()+" served by "+victim, func() (bool, string) {
			holder = e.served(ip)
			return holder == victim, "served by " + holder
		})
		return holder
	}
	st := e.startPointVia(lan)
	assert.Equal(t, st.holders[ip], victim, "preferred-nodes")

	conn, err := e.c.UDPFrom(peer, 0)
	e.must(err)
	defer conn.Close()
	stop, done := make(chan struct{}), make(chan int, 1)
	go replay(conn, recorded, 300*time.Millisecond, stop, done)
	e.throughout("replays of "+peer+"'s datagrams to "+third+" sent to "+victim, 4*leaseDuration, st.answering)
	close(stop)
	sent := <-done
	e.assertNothingMoved(st.before, e.lockStates(ip))
	assert.Equal(t, e.countLines(st.mark, victim, "a peer no longer hears this node"), 0)
	r := st.probes[ip].Stop()
	e.noTwoMACs(r)
	rep := st.w.report()[ip]
	assert.Check(t, len(rep.double) == 0 && len(rep.unbound) == 0, "%s", rep)
	dropped, err := scrapeCounter(e.c.ClientHTTP(), "http://"+e.c.DaemonMetricsAddr(victim)+"/metrics", `eip_liveness_datagrams_dropped_total{reason="misaddressed"}`)
	e.must(err)
	t.Logf("%d replays sent, %v dropped as misaddressed", sent, dropped)
	assert.Assert(t, dropped >= 2, "the replays reached %s", victim)
}

// The holder's eipd is killed; its datagrams, recorded before, are sent
// again from its address and port every 250 ms, as long as it takes. A
// survivor takes the IP over all the same. (The replays kept the dead
// node alive: its IP answered again only 14 s after the kill, when they
// stopped.)
func TestLANReplayOfKilledNodeDelaysNoFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(144)
	st := e.startPoint(ip)
	old := st.holders[ip]
	var recorded []testenv.Captured
	e.captured(old, func(c testenv.Captured, _ lanlive.Datagram) bool {
		recorded = append(recorded, c)
		return len(recorded) == 12
	})
	e.must(e.c.StopDaemon(old, syscall.SIGKILL))
	killed := time.Now()
	conn, err := e.c.UDPFrom(old, livenessPort)
	e.must(err)
	defer conn.Close()
	stop, done := make(chan struct{}), make(chan int, 1)
	go replay(conn, recorded, 250*time.Millisecond, stop, done)
	defer func() {
		if stop != nil {
			close(stop)
			<-done
		}
	}()
	next := e.takenOver(ip, old, st.probes[ip])
	close(stop)
	sent := <-done
	stop = nil
	r := st.probes[ip].Stop()
	e.noTwoMACs(r)
	e.answeredWithin(r, next, killed, failoverBound, fmt.Sprintf("%s killed, %d of its datagrams replayed", old, sent))
}

// The documented rotation of the liveness key (docs/operating.md): the new
// key under key and the old one under previous, then previous removed.
// Every eipd signs with the new key, and no IP moves: the holder keeps
// it, answering throughout, and no datagram is dropped for its signature.
func TestLANKeyRotationMovesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, defaultConfig())
	ip := testenv.ServiceIP(145)
	st := e.startPoint(ip)
	secrets := e.k.CoreV1().Secrets(testenv.Namespace)
	s, err := secrets.Get(e.ctx, lanlive.KeySecret, metav1.GetOptions{})
	e.must(err)
	old := s.Data[lanlive.KeyField]
	fresh := make([]byte, 32)
	_, err = rand.Read(fresh)
	e.must(err)
	s.Data = map[string][]byte{lanlive.KeyField: fresh, lanlive.PreviousField: old}
	_, err = secrets.Update(e.ctx, s, metav1.UpdateOptions{})
	e.must(err)
	e.throughout("the new key is accepted, then signs", lanlive.KeyGrace+3*leaseDuration, st.answering)
	for _, n := range e.nodes {
		e.signedWith(n, fresh)
	}
	s, err = secrets.Get(e.ctx, lanlive.KeySecret, metav1.GetOptions{})
	e.must(err)
	delete(s.Data, lanlive.PreviousField)
	_, err = secrets.Update(e.ctx, s, metav1.UpdateOptions{})
	e.must(err)
	e.throughout("the previous key removed", 3*leaseDuration, st.answering)

	e.assertNothingMoved(st.before, e.lockStates(ip))
	r := st.probes[ip].Stop()
	e.noTwoMACs(r)
	assert.Check(t, len(r.MACs()) == 1, "answered by %v", r.MACs())
	rep := st.w.report()[ip]
	assert.Check(t, len(rep.double) == 0 && len(rep.unbound) == 0, "%s", rep)
	for _, n := range e.nodes {
		bad, err := scrapeCounter(e.c.ClientHTTP(), "http://"+e.c.DaemonMetricsAddr(n)+"/metrics", `eip_liveness_datagrams_dropped_total{reason="bad-signature"}`)
		e.must(err)
		assert.Check(t, bad == 0, "%s dropped %v datagrams for their signature", n, bad)
	}
}

// signedWith waits until a datagram node sends is signed with key.
func (e *env) signedWith(node string, key []byte) {
	e.t.Helper()
	e.captured(node, func(c testenv.Captured, _ lanlive.Datagram) bool {
		mac := hmac.New(sha256.New, key)
		mac.Write(c.Payload[sha256.Size:])
		return bytes.Equal(mac.Sum(nil), c.Payload[:sha256.Size])
	})
}

// eipd's metrics and liveness ports bind the node's address alone. With
// the port filter (the default) nothing of the node answers on an
// external IP: the connection and the datagram are dropped, while on the
// node's address both answer. With port-filter off, the kernel refuses
// both on the external IP: no socket is bound there. (Bound on every
// address, both answered on every IP eip served.)
func TestListenersNotOnExternalIPs(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	e := newEnv(t, cfg)
	ip := testenv.ServiceIP(146)
	st := e.startPoint(ip)
	holder := st.holders[ip]
	n, err := e.c.Node(holder)
	e.must(err)
	metricsPort := e.c.DaemonMetricsAddr(holder)
	_, port, err := net.SplitHostPort(metricsPort)
	e.must(err)
	client := e.c.ClientHTTP()
	client.Timeout = 2 * time.Second
	metricsOn := func(addr string) error {
		resp, err := client.Get("http://" + net.JoinHostPort(addr, port) + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var timeout net.Error
	err = metricsOn(ip.String())
	assert.Check(t, errors.As(err, &timeout) && timeout.Timeout(), "metrics on %s through the port filter: %v", ip, err)
	assert.Check(t, errors.Is(e.udpAnswer(ip), os.ErrDeadlineExceeded), "liveness port on %s through the port filter", ip)
	e.must(metricsOn(n.IPv4.String()))
	assert.Check(t, errors.Is(e.udpAnswer(n.IPv4), os.ErrDeadlineExceeded), "liveness port on %s's address", holder)

	cfg["port-filter"] = "off"
	e.setConfig(cfg)
	e.eventually("the kernel refusing metrics on "+ip.String(), func() (bool, string) {
		err := metricsOn(ip.String())
		return errors.Is(err, syscall.ECONNREFUSED), fmt.Sprint(err)
	})
	assert.Check(t, errors.Is(e.udpAnswer(ip), syscall.ECONNREFUSED), "liveness port on %s", ip)
	e.must(metricsOn(n.IPv4.String()))
}

// udpAnswer sends a datagram that is not eip's to the liveness port of ip
// from the client, and returns what reading the answer gives: ECONNREFUSED
// when the kernel says no socket listens there, a deadline when one
// listens and drops it, as eipd does.
func (e *env) udpAnswer(ip netip.Addr) error {
	e.t.Helper()
	conn, err := e.c.UDPFrom(testenv.Client, 0)
	e.must(err)
	defer conn.Close()
	to := netip.AddrPortFrom(ip, livenessPort)
	raw, err := conn.SyscallConn()
	e.must(err)
	// Connected, so that the kernel reports an ICMP port unreachable.
	var cerr error
	e.must(raw.Control(func(fd uintptr) {
		v4 := ip.As4()
		cerr = syscall.Connect(int(fd), &syscall.SockaddrInet4{Port: int(to.Port()), Addr: v4})
	}))
	e.must(cerr)
	_, err = conn.Write([]byte("not eip " + strconv.Itoa(int(to.Port()))))
	e.must(err)
	e.must(conn.SetReadDeadline(time.Now().Add(2 * time.Second)))
	_, err = conn.Read(make([]byte, 64))
	e.t.Logf("UDP to %s: %v", to, err)
	return err
}
