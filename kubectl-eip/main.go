// Command kubectl-eip is the kubectl plugin for eip ("kubectl eip ...").
package main

import (
	"fmt"
	"os"
)

// version is stamped by the Makefile.
var version = "dev"

func main() {
	fmt.Fprintln(os.Stderr, "kubectl-eip", version, "(status and move are not built yet)")
	os.Exit(1)
}
