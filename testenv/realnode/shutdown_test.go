package realnode

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// TestShutdownWaitsForDelayLock runs a node's system bus and logind
// without the rest of the node, takes a shutdown delay lock as the kubelet
// does, and checks what the kubelet relies on: Shutdown makes logind
// announce PrepareForShutdown(true), logind goes on to power off only once
// the lock is released, well before InhibitDelayMaxSec, and nothing of the
// node is left after Kill.
func TestShutdownWaitsForDelayLock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, cgroups, mount namespaces)")
	}
	if err := CheckShutdownTools(); err != nil {
		t.Skip(err)
	}
	name := "eip-shutdown-test-" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	g := GracefulShutdown{Period: 30 * time.Second, CriticalPods: 10 * time.Second}
	n := &Node{cfg: NodeConfig{Name: name, Netns: name, Dir: t.TempDir(), Shutdown: &g},
		root: cgroup{"/" + name}, daemon: cgroup{"/" + name + "/daemons"}}
	for _, c := range []*cgroup{&n.root, &n.daemon} {
		if err := c.create(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = n.root.remove() })
	if err := os.WriteFile(n.path("dbus.conf"), []byte(busConfig(n.path("system_bus_socket"))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.mu.Lock()
	err := n.startLogin(ctx, g)
	n.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}

	// The kubelet's part (k8s.io/kubernetes pkg/kubelet/nodeshutdown/systemd).
	kubelet, err := dbus.Connect(n.busAddress())
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.Close()
	login := kubelet.Object(login1Name, login1Path)
	var delay uint64
	if err := login.StoreProperty(login1Manager+".InhibitDelayMaxUSec", &delay); err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(delay) * time.Microsecond; got != g.Period {
		t.Errorf("InhibitDelayMaxUSec %s, want the grace period %s", got, g.Period)
	}
	var lock dbus.UnixFD
	if err := login.Call(login1Manager+".Inhibit", 0, "shutdown", "kubelet", "test", "delay").Store(&lock); err != nil {
		t.Fatal(err)
	}
	if err := kubelet.AddMatchSignal(dbus.WithMatchInterface(login1Manager), dbus.WithMatchMember("PrepareForShutdown")); err != nil {
		t.Fatal(err)
	}
	signals := make(chan *dbus.Signal, 4)
	kubelet.Signal(signals)

	began := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- n.Shutdown(ctx) }()
	select {
	case s := <-signals:
		if len(s.Body) != 1 || s.Body[0] != true {
			t.Fatalf("signal %s %v, want PrepareForShutdown(true)", s.Name, s.Body)
		}
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) before logind announced the shutdown", err)
	case <-ctx.Done():
		t.Fatal("no PrepareForShutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while the delay lock was held", err)
	default:
	}
	released := time.Now()
	if err := os.NewFile(uintptr(lock), "inhibit").Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	t.Logf("logind went on to power off %s after the lock was released (%s after PowerOff)",
		time.Since(released).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if time.Since(began) >= g.Period {
		t.Errorf("logind waited out InhibitDelayMaxSec (%s) instead of the lock", g.Period)
	}

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if pids, err := n.root.pids(); err != nil || len(pids) > 0 {
		t.Errorf("left in the node's cgroup: %v (%v)", pids, err)
	}
}
