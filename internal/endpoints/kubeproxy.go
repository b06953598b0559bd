package endpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	Client *http.Client // each request's timeout included
	Clock  clock.Clock
	// Every is the pause between two questions; GiveUp how long to ask
	// before the verdict is Unknown.
	Every, GiveUp time.Duration
}

// Check asks kube-proxy at addr until it delivers (Delivers), nothing
// listens there (Unknown: no kube-proxy health check on the node), GiveUp
// passed, or ctx ended (Unknown).
func (k KubeProxy) Check(ctx context.Context, addr netip.AddrPort) Verdict {
	until := k.Clock.Now().Add(k.GiveUp)
	for {
		n, err := k.localEndpoints(ctx, addr)
		switch {
		case err == nil && n > 0:
			return Delivers
		case errors.Is(err, syscall.ECONNREFUSED), !k.Clock.Now().Before(until):
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
func (k KubeProxy) localEndpoints(ctx context.Context, addr netip.AddrPort) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/", nil)
	if err != nil {
		return 0, fmt.Errorf("ask kube-proxy at %s: %w", addr, err)
	}
	resp, err := k.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("ask kube-proxy at %s: %w", addr, err)
	}
	defer resp.Body.Close()
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

// NewKubeProxy asks every 100 ms, each question within 500 ms, for up to
// 10 s: kube-proxy syncs its rules at most once a second by default, and
// a node that has not delivered after ten of them is not worth waiting
// for. It connects directly, never through an HTTP proxy of the
// environment, and a new connection each time.
func NewKubeProxy(clk clock.Clock) KubeProxy {
	return KubeProxy{
		Client: &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}},
		Clock:  clk, Every: 100 * time.Millisecond, GiveUp: 10 * time.Second,
	}
}
