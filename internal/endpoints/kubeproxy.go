package endpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// KubeProxy asks kube-proxy's health check node port of a Service
// (spec.healthCheckNodePort, which a LoadBalancer Service with
// externalTrafficPolicy: Local has) whether kube-proxy on a node delivers
// its traffic there: it answers 200 with localEndpoints > 0 once its rules
// include a ready endpoint on the node, and 503 before. Cloud load
// balancers pick their nodes by the same answer.
type KubeProxy struct {
	// Timeout bounds each question, its connection included.
	Timeout time.Duration
	Clock   clock.Clock
	// Every is the pause between two questions; GiveUp how long to ask
	// before the verdict is Unknown.
	Every, GiveUp time.Duration
}

// errNotKubeProxy: what answered redirects, which kube-proxy never does.
var errNotKubeProxy = errors.New("answered with a redirect, which kube-proxy never does")

// Check asks kube-proxy at addr until it delivers (Delivers), nothing
// listens there or what answers is not kube-proxy (Unknown: no kube-proxy
// health check on the node), GiveUp passed, or ctx ended (Unknown).
//
// eipd runs on the host network: whatever answers on a node's health check
// port could otherwise send it on to the host's own services or to a
// cloud's metadata address. So a question connects only to addr, whatever
// the request would name, and follows no redirect.
func (k KubeProxy) Check(ctx context.Context, addr netip.AddrPort) Verdict {
	until := k.Clock.Now().Add(k.GiveUp)
	client := k.client(addr)
	for {
		n, err := k.localEndpoints(ctx, client, addr)
		switch {
		case err == nil && n > 0:
			return Delivers
		case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, errNotKubeProxy), !k.Clock.Now().Before(until):
			return Unknown
		}
		select {
		case <-ctx.Done():
			return Unknown
		case <-k.Clock.After(k.Every):
		}
	}
}

// localEndpoints is what kube-proxy at addr says: how many local endpoints
// it delivers to.
func (k KubeProxy) localEndpoints(ctx context.Context, client *http.Client, addr netip.AddrPort) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/", nil)
	if err != nil {
		return 0, fmt.Errorf("ask kube-proxy at %s: %w", addr, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("ask kube-proxy at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return 0, fmt.Errorf("ask kube-proxy at %s: %w", addr, errNotKubeProxy)
	}
	var body struct {
		LocalEndpoints int `json:"localEndpoints"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body); err != nil {
		return 0, fmt.Errorf("read kube-proxy's answer at %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil
	}
	return body.LocalEndpoints, nil
}

// client asks kube-proxy at addr: it connects to addr alone, directly
// (never through an HTTP proxy of the environment), a new connection each
// time, and returns a redirect as it came instead of following it.
func (k KubeProxy) client(addr netip.AddrPort) *http.Client {
	dialer := &net.Dialer{Timeout: k.Timeout}
	return &http.Client{
		Timeout: k.Timeout,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", addr.String())
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// NewKubeProxy asks every 100 ms, each question within 500 ms, for up to
// 10 s: kube-proxy syncs its rules at most once a second by default, and
// a node that has not delivered after ten of them is not worth waiting
// for.
func NewKubeProxy(clk clock.Clock) KubeProxy {
	return KubeProxy{Timeout: 500 * time.Millisecond, Clock: clk, Every: 100 * time.Millisecond, GiveUp: 10 * time.Second}
}
