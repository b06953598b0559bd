// Command etcd is etcd built from go.etcd.io/etcd/server/v3 at the version
// the kube-apiserver of this module is tested against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
