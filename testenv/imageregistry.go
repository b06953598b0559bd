package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// RegistryPort is the port of the cluster's container registry on the
// control plane's LAN address.
const RegistryPort = 5000

// imageRegistry is a container registry (go-containerregistry's, in
// memory) that the real nodes pull from: it serves HTTPS on the control
// plane's LAN address, with the API server's certificate (the cluster's CA
// signed it for that address), and plain HTTP on the test process's
// loopback, for pushing.
type imageRegistry struct {
	lan, local *http.Server
	localAddr  string
}

// startImageRegistry starts the registry; Close stops it.
func (c *Cluster) startImageRegistry() error {
	cert, err := tls.LoadX509KeyPair(c.pki.serverCert, c.pki.serverKey)
	if err != nil {
		return fmt.Errorf("image registry: %w", err)
	}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var lanLn net.Listener
	addr := netip.AddrPortFrom(c.cp.ipv4, RegistryPort).String()
	if err := c.cp.ns.do(func() error {
		var err error
		lanLn, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return fmt.Errorf("image registry on %s: %w", addr, err)
	}
	localLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lanLn.Close()
		return fmt.Errorf("image registry on loopback: %w", err)
	}
	r := &imageRegistry{
		lan:       &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 10 * time.Second},
		local:     &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		localAddr: localLn.Addr().String(),
	}
	go r.lan.ServeTLS(lanLn, "", "")
	go r.local.Serve(localLn)
	c.mu.Lock()
	c.imageRegistry = r
	c.mu.Unlock()
	return nil
}

func (r *imageRegistry) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(r.lan.Shutdown(ctx), r.local.Shutdown(ctx))
}

// Registry is the cluster's container registry as the nodes and the client
// reach it, "host:port" over HTTPS with a certificate of CACert; empty
// without Options.Registry.
func (c *Cluster) Registry() string {
	if !c.opts.Registry {
		return ""
	}
	return netip.AddrPortFrom(c.cp.ipv4, RegistryPort).String()
}

// RegistryPush is the same registry as the test process reaches it,
// "127.0.0.1:port" over plain HTTP: what is pushed there is pulled from
// Registry.
func (c *Cluster) RegistryPush() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.imageRegistry == nil {
		return ""
	}
	return c.imageRegistry.localAddr
}

// CACert is the file of the cluster's CA certificate, which signed the
// API server's and the registry's.
func (c *Cluster) CACert() string { return c.pki.caCert }
