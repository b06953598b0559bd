package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestSpawnIntoCgroupAndRemove starts a process (and its child) the way a
// node's daemons start, in a scratch network namespace, and checks that
// removing the cgroup kills both and leaves no cgroup directory.
func TestSpawnIntoCgroupAndRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, cgroups)")
	}
	name := "eip-realnode-test-" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	root := &cgroup{"/" + name}
	group := &cgroup{"/" + name + "/daemons"}
	if err := root.create(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.remove() })
	if err := group.create(); err != nil {
		t.Fatal(err)
	}
	p, err := spawn(name, group, filepath.Join(t.TempDir(), "log"), nil, "/bin/sh", "-c", "sleep 60 & wait")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 2 && time.Now().Before(deadline) {
		if pids, err = root.pids(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(pids) != 2 || !slices.Contains(pids, p.cmd.Process.Pid) {
		t.Fatalf("cgroup holds %v, want the shell %d and its sleep", pids, p.cmd.Process.Pid)
	}
	if err := root.remove(); err != nil {
		t.Fatal(err)
	}
	if !p.exited() {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the shell survived the cgroup's removal")
		}
	}
	hs, err := hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, name)); !os.IsNotExist(err) {
			t.Errorf("%s/%s left behind (%v)", h, name, err)
		}
	}
}
