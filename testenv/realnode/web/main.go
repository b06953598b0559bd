// Command web is the test environment's application: an HTTP server on
// :8080 that answers every request with the pod and node that served it
// ("pod=web-5c9d-x2 node=node-2"), from the downward-API variables
// POD_NAME and NODE_NAME. On SIGTERM it keeps serving for 3 s, while
// the endpoints of its Services drop it, then stops gracefully.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	answer := fmt.Sprintf("pod=%s node=%s\n", os.Getenv("POD_NAME"), os.Getenv("NODE_NAME"))
	srv := &http.Server{Addr: ":8080", ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, answer) })}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		time.Sleep(3 * time.Second)
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown) // ListenAndServe returns either way
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "web:", err)
		os.Exit(1)
	}
}
