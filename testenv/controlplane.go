package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	etcdClientURL = "http://127.0.0.1:2379"
	etcdPeerURL   = "http://127.0.0.1:2380"
	// serviceCIDR is dual-stack, so that tests can create IPv6 and
	// dual-stack Services. Cluster IPs are never put on an interface (there
	// is no kube-proxy); IPv4 comes first, so Services are IPv4 by default.
	serviceCIDR = "10.96.0.0/16,2001:db8:ffff:96::/112"
	// stopGrace bounds a graceful stop of a control-plane process.
	stopGrace = 30 * time.Second
)

func (c *Cluster) startEtcd(ctx context.Context) error {
	args := []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(c.dir, "etcd"),
		"--listen-client-urls=" + etcdClientURL,
		"--advertise-client-urls=" + etcdClientURL,
		"--listen-peer-urls=" + etcdPeerURL,
		"--initial-advertise-peer-urls=" + etcdPeerURL,
		"--initial-cluster=testenv=" + etcdPeerURL,
		// A test cluster needs no durability, and fsync dominates its latency.
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	p, err := startProcess(c.cp.ns, "etcd", filepath.Join(c.dir, "etcd.log"), nil,
		filepath.Join(c.opts.K8sBinDir, "etcd"), args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd = p
	c.mu.Unlock()
	hc := &http.Client{Transport: &http.Transport{DialContext: c.cp.ns.dial}, Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	return p.waitFor(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, etcdClientURL+"/health", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), `"health":"true"`) {
			return fmt.Errorf("etcd health: %s", body)
		}
		return nil
	})
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	args := []string{
		"--etcd-servers=" + etcdClientURL,
		// kube-apiserver refuses a loopback advertise address with the
		// default endpoint reconciler; the namespace's own address is real.
		"--advertise-address=" + c.cp.ipv4.String(),
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + c.pki.serverCert,
		"--tls-private-key-file=" + c.pki.serverKey,
		"--client-ca-file=" + c.pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pki.saPub,
		"--service-account-signing-key-file=" + c.pki.saKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC",
		"--cert-dir=" + filepath.Join(c.dir, "apiserver-certs"),
		"--profiling=" + strconv.FormatBool(c.opts.Profiling),
		"--audit-policy-file=" + filepath.Join(c.dir, "audit-policy.yaml"),
		"--audit-log-path=" + c.AuditLog(),
		// Real kubelets register their node name as the Hostname address,
		// which nothing resolves: reach them by IP (kubectl logs, exec).
		"--kubelet-preferred-address-types=InternalIP",
	}
	if err := os.WriteFile(filepath.Join(c.dir, "audit-policy.yaml"), []byte(auditPolicy), 0o644); err != nil {
		return fmt.Errorf("write audit policy: %w", err)
	}
	p, err := startProcess(c.cp.ns, "kube-apiserver", filepath.Join(c.dir, "kube-apiserver.log"), nil,
		filepath.Join(c.opts.K8sBinDir, "kube-apiserver"), args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.apiserver = p
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	return p.waitFor(ctx, 100*time.Millisecond, func(ctx context.Context) error {
		_, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").Timeout(2 * time.Second).DoRaw(ctx)
		return err
	})
}

// auditPolicy records the metadata of every request the ServiceAccount
// eip makes, and nothing else: what eipd actually does with its RBAC.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["system:serviceaccount:` + Namespace + `:` + ServiceAccount + `"]
- level: None
`

// AuditLog is the API server's audit log: one JSON audit.k8s.io/v1 Event
// a line for each request of the ServiceAccount eip (see auditPolicy).
func (c *Cluster) AuditLog() string { return filepath.Join(c.dir, "audit.log") }

// APIServerPID and EtcdPID are the pids of kube-apiserver and etcd, 0
// while they do not run: the benchmark accounts for their CPU.
func (c *Cluster) APIServerPID() int { return c.runningPID(func() *process { return c.apiserver }) }

func (c *Cluster) EtcdPID() int { return c.runningPID(func() *process { return c.etcd }) }

func (c *Cluster) runningPID(which func() *process) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := which(); p != nil && p.running() {
		return p.pid()
	}
	return 0
}

// StopAPIServer signals kube-apiserver (SIGTERM: graceful, SIGKILL: a
// crash) and waits for it to exit; after SIGTERM it is killed if it has not
// exited within 30 s.
func (c *Cluster) StopAPIServer(sig syscall.Signal) error {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(sig, stopGrace)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer and waits
// until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p != nil && p.running() {
		return fmt.Errorf("start kube-apiserver: already running")
	}
	return c.startAPIServer(ctx)
}

// StopEtcd signals etcd and waits for it to exit, as StopAPIServer does.
// The API server keeps running and fails its requests until StartEtcd.
// SIGKILL loses no data (the kernel still has it) and is much faster: etcd's
// graceful stop waits seconds for its clients' streams.
func (c *Cluster) StopEtcd(sig syscall.Signal) error {
	c.mu.Lock()
	p := c.etcd
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(sig, stopGrace)
}

// StartEtcd starts etcd again on its data after StopEtcd and waits until it
// is healthy.
func (c *Cluster) StartEtcd(ctx context.Context) error {
	c.mu.Lock()
	p := c.etcd
	c.mu.Unlock()
	if p != nil && p.running() {
		return fmt.Errorf("start etcd: already running")
	}
	return c.startEtcd(ctx)
}
