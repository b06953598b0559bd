// Command web is the test environment's application: an HTTP server on
// :8080, and on :80 for examples written for a usual web server, that answers every request with the pod and node that served it,
// from the downward-API variables POD_NAME and NODE_NAME, and the address
// the request came from ("pod=web-5c9d-x2 node=node-2 remote=198.18.0.2":
// the client's own with externalTrafficPolicy: Local, a node's when
// kube-proxy masquerades). On SIGTERM it keeps serving for 3 s, while
// the endpoints of its Services drop it, then stops gracefully.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	answer := fmt.Sprintf("pod=%s node=%s", os.Getenv("POD_NAME"), os.Getenv("NODE_NAME"))
	srv := &http.Server{Addr: ":8080", ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			remote, _, _ := net.SplitHostPort(r.RemoteAddr)
			fmt.Fprintf(w, "%s remote=%s\n", answer, remote)
		})}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		time.Sleep(3 * time.Second)
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown) // ListenAndServe returns either way
	}()
	ln, err := net.Listen("tcp", ":80")
	if err != nil {
		fmt.Fprintln(os.Stderr, "web:", err)
		os.Exit(1)
	}
	go srv.Serve(ln) // Shutdown closes it too
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "web:", err)
		os.Exit(1)
	}
}
