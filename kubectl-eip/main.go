// Command kubectl-eip is the kubectl plugin for eip ("kubectl eip ...").
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/eip-project/eip/internal/buildinfo"
	"github.com/eip-project/eip/internal/cli"
)

// version and commit are stamped by the Makefile (-X): the VERSION file
// and the commit built.
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, buildinfo.Of(version, commit).String()).ExecuteContext(ctx)
	stop()
	if err != nil {
		cli.WriteError(os.Stderr, err)
		os.Exit(1)
	}
}
