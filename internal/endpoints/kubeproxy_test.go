package endpoints

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	clocktesting "k8s.io/utils/clock/testing"
)

// kubeProxyAnswering serves kube-proxy's health check on loopback: 503
// with no local endpoint for the first notYet questions, then 200 with
// one (never, when notYet is negative).
func kubeProxyAnswering(t *testing.T, notYet int64) (netip.AddrPort, *atomic.Int64) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if notYet < 0 || n <= notYet {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"service":{"namespace":"ns","name":"web"},"localEndpoints":0,"serviceProxyHealthy":true}`)
			return
		}
		fmt.Fprint(w, `{"service":{"namespace":"ns","name":"web"},"localEndpoints":1,"serviceProxyHealthy":true}`)
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String()), &asked
}

// verdictOf runs k.Check, stepping its fake clock by Every whenever it waits,
// and returns the verdict.
func verdictOf(t *testing.T, addr netip.AddrPort) Verdict {
	clk := clocktesting.NewFakeClock(time.Now())
	k := NewKubeProxy(clk)
	out := make(chan Verdict, 1)
	go func() { out <- k.Check(context.Background(), addr) }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case v := <-out:
			return v
		case <-deadline:
			t.Fatal("no verdict")
		case <-time.After(time.Millisecond):
			if clk.HasWaiters() {
				clk.Step(k.Every)
			}
		}
	}
}

func TestKubeProxyDeliversOnceItSaysSo(t *testing.T) {
	addr, asked := kubeProxyAnswering(t, 3)
	assert.Equal(t, verdictOf(t, addr), Delivers)
	assert.Equal(t, asked.Load(), int64(4))
}

func TestKubeProxyNeverDeliveringIsUnknownAfterGivingUp(t *testing.T) {
	addr, asked := kubeProxyAnswering(t, -1)
	assert.Equal(t, verdictOf(t, addr), Unknown)
	k := NewKubeProxy(nil)
	assert.Equal(t, asked.Load(), int64(k.GiveUp/k.Every)+1)
}

func TestKubeProxyNotListeningIsUnknownAtOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	addr := netip.MustParseAddrPort(l.Addr().String())
	assert.NilError(t, l.Close())
	assert.Equal(t, verdictOf(t, addr), Unknown)
}

// Whatever answers on a node's health check port and redirects (to the
// host's own services, to a cloud's metadata address) is not kube-proxy:
// the verdict is Unknown at once, and the redirect is not followed.
func TestKubeProxyRedirectIsNotFollowed(t *testing.T) {
	target, followed := kubeProxyAnswering(t, 0)
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Redirect(w, r, "http://"+target.String()+"/", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	assert.Equal(t, verdictOf(t, netip.MustParseAddrPort(srv.Listener.Addr().String())), Unknown)
	assert.Equal(t, asked.Load(), int64(1))
	assert.Equal(t, followed.Load(), int64(0))
}

// A question connects to the address asked and nowhere else, even when
// the request's host says otherwise.
func TestKubeProxyDialsOnlyTheAddressAsked(t *testing.T) {
	addr, asked := kubeProxyAnswering(t, 0)
	other, otherAsked := kubeProxyAnswering(t, 0)
	c := NewKubeProxy(nil).client(addr)
	resp, err := c.Get("http://" + other.String() + "/")
	assert.NilError(t, err)
	assert.NilError(t, resp.Body.Close())
	assert.Equal(t, asked.Load(), int64(1))
	assert.Equal(t, otherAsked.Load(), int64(0))
}
