package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// GracefulShutdown turns on the kubelet's graceful node shutdown on a node:
// the kubelet's shutdownGracePeriod and shutdownGracePeriodCriticalPods.
//
// The kubelet learns of a shutdown from systemd-logind over the system bus:
// at start it takes a shutdown delay lock (Inhibit), and when logind
// announces PrepareForShutdown(true) it stops the node's pods, critical
// pods last, then releases the lock. The node runs the same parts a
// systemd host has for that: Debian's dbus-daemon as the node's system bus,
// and Debian's systemd-logind, configured with InhibitDelayMaxSec equal to
// the grace period, as an operator configures it.
//
// What the node lacks is systemd as its init system. logind asks the init
// system two things when told to power off: whether poweroff.target is
// loaded (before announcing the shutdown), and, once every delay lock is
// released or InhibitDelayMaxSec has passed, to start poweroff.target.
// initStandIn answers both, and records the second: that is where systemd
// would stop what runs and power the machine off, which the caller of
// Node.Shutdown does by killing the node. Nothing else of systemd is
// emulated: no unit is stopped in order, and no job is reported done.
type GracefulShutdown struct {
	// Period is the kubelet's shutdownGracePeriod and logind's
	// InhibitDelayMaxSec, whole seconds.
	Period time.Duration
	// CriticalPods is the kubelet's shutdownGracePeriodCriticalPods: the
	// part of Period given to pods of a system-critical priority class
	// (eipd's system-node-critical among them), which stop last.
	CriticalPods time.Duration
}

// Debian's system bus daemon (package dbus-daemon) and login manager
// (package systemd).
const (
	DBusDaemon = "/usr/bin/dbus-daemon"
	Logind     = "/usr/lib/systemd/systemd-logind"
)

// CheckShutdownTools says which of the programs a node with
// GracefulShutdown runs is missing, and how to install it.
func CheckShutdownTools() error {
	var errs error
	for bin, pkg := range map[string]string{DBusDaemon: "dbus-daemon", Logind: "systemd"} {
		if _, err := os.Stat(bin); err != nil {
			errs = errors.Join(errs, fmt.Errorf("real nodes with graceful shutdown: %w (apt-get install %s)", err, pkg))
		}
	}
	return errs
}

const (
	login1Name    = "org.freedesktop.login1"
	login1Path    = dbus.ObjectPath("/org/freedesktop/login1")
	login1Manager = "org.freedesktop.login1.Manager"
	systemd1Name  = "org.freedesktop.systemd1"
	poweroffUnit  = "poweroff.target"
)

func (g GracefulShutdown) validate() error {
	if g.Period <= 0 || g.Period%time.Second != 0 || g.CriticalPods < 0 || g.CriticalPods > g.Period {
		return fmt.Errorf("graceful shutdown: period %s must be whole seconds above 0, and critical pods' %s at most that", g.Period, g.CriticalPods)
	}
	return nil
}

// kubeletConfig is the kubelet configuration's part for it.
func (g GracefulShutdown) kubeletConfig() string {
	return fmt.Sprintf("shutdownGracePeriod: %s\nshutdownGracePeriodCriticalPods: %s\n", g.Period, g.CriticalPods)
}

// logindConfig is logind's drop-in: a delay lock may hold the shutdown for
// the whole grace period (the kubelet asks for no more, so it leaves the
// host's /etc/systemd alone); no virtual terminals, which a node namespace
// has none of.
func (g GracefulShutdown) logindConfig() string {
	return fmt.Sprintf("[Login]\nInhibitDelayMaxSec=%d\nNAutoVTs=0\nReserveVT=0\n", int(g.Period/time.Second))
}

// busConfig is the node's system bus: its own socket, and a policy that
// lets its clients (root: logind, the kubelet, the test) own their names
// and call each other. No service directories: nothing is activated on
// demand.
func busConfig(socket string) string {
	return `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=` + socket + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`
}

// logindInOwnRun runs logind (the last argument) in a mount namespace of its
// own with an empty /run, as each node has its own: logind keeps its state
// and sessions under the fixed path /run/systemd. The namespace, and the
// tmpfs in it, end with logind. $1 is the drop-in configuration.
const logindInOwnRun = `mount -t tmpfs -o mode=0755,size=8m eip-node-run /run &&
mkdir -p /run/systemd/logind.conf.d &&
printf '%s' "$1" >/run/systemd/logind.conf.d/99-testenv.conf &&
exec "$2"`

// startLogin starts the node's system bus, the init stand-in on it and
// logind, and waits until logind serves.
func (n *Node) startLogin(ctx context.Context, g GracefulShutdown) error {
	bus, err := spawn(n.cfg.Netns, &n.daemon, n.path("dbus-daemon.log"), nil, DBusDaemon,
		"--nofork", "--nopidfile", "--nosyslog", "--config-file="+n.path("dbus.conf"))
	if err != nil {
		return err
	}
	n.procs = append(n.procs, bus)
	standIn, err := connectInit(ctx, n.busAddress(), bus)
	if err != nil {
		return err
	}
	n.standIn = standIn
	logind, err := spawn(n.cfg.Netns, &n.daemon, n.path("systemd-logind.log"),
		[]string{"DBUS_SYSTEM_BUS_ADDRESS=" + n.busAddress(), "SYSTEMD_LOG_TARGET=console"},
		"unshare", "--mount", "--propagation=private", "--", "/bin/sh", "-c", logindInOwnRun, "sh", g.logindConfig(), Logind)
	if err != nil {
		return err
	}
	logind.name = "systemd-logind"
	n.procs = append(n.procs, logind)
	return waitFor(ctx, "logind serving on "+n.busAddress(), logind, func() bool {
		var owned bool
		err := standIn.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, login1Name).Store(&owned)
		return err == nil && owned
	})
}

func (n *Node) busAddress() string { return "unix:path=" + n.path("system_bus_socket") }

// waitFor polls cond until it holds, p exits or a deadline passes.
func waitFor(ctx context.Context, what string, p *proc, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !cond() {
		if p.exited() {
			return fmt.Errorf("wait for %s: %s exited; last lines of %s:\n%s", what, p.name, p.log, p.tail())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w; last lines of %s:\n%s", what, ctx.Err(), p.log, p.tail())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// initStandIn is the part of systemd (the init system, PID 1) that logind
// calls when powering off; see GracefulShutdown. It serves on the node's
// system bus from this process.
type initStandIn struct {
	conn *dbus.Conn
	// poweroff receives the unit logind asked to start.
	poweroff chan string
}

// connectInit connects to the bus that bus serves, once it accepts
// connections, and serves the init stand-in there.
func connectInit(ctx context.Context, address string, bus *proc) (*initStandIn, error) {
	var conn *dbus.Conn
	err := waitFor(ctx, "the system bus "+address, bus, func() bool {
		var err error
		conn, err = dbus.Connect(address)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	s := &initStandIn{conn: conn, poweroff: make(chan string, 1)}
	err = errors.Join(
		conn.Export(managerCalls{s}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"),
		conn.Export(unitProperties{}, unitPath(poweroffUnit), "org.freedesktop.DBus.Properties"))
	if err == nil {
		var reply dbus.RequestNameReply
		reply, err = conn.RequestName(systemd1Name, dbus.NameFlagDoNotQueue)
		if err == nil && reply != dbus.RequestNameReplyPrimaryOwner {
			err = fmt.Errorf("%s already owned", systemd1Name)
		}
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("serve %s on %s: %w", systemd1Name, address, err)
	}
	return s, nil
}

// unitPath is systemd's object path of a unit: every byte but letters and
// digits escaped as _xx.
func unitPath(unit string) dbus.ObjectPath {
	var b strings.Builder
	for _, c := range []byte(unit) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return dbus.ObjectPath("/org/freedesktop/systemd1/unit/" + b.String())
}

// managerCalls are the methods of org.freedesktop.systemd1.Manager that
// logind calls.
type managerCalls struct{ s *initStandIn }

// Subscribe asks for job signals; logind calls it at start.
func (managerCalls) Subscribe() *dbus.Error { return nil }

// StartUnit is logind starting poweroff.target once the shutdown may go on.
func (m managerCalls) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	if name != poweroffUnit {
		return "", dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"no unit " + name + " on this node"})
	}
	select {
	case m.s.poweroff <- name:
	default: // already asked
	}
	return "/org/freedesktop/systemd1/job/1", nil
}

// unitProperties are poweroff.target's properties, of which logind reads
// LoadState.
type unitProperties struct{}

func (unitProperties) Get(iface, property string) (dbus.Variant, *dbus.Error) {
	if iface == "org.freedesktop.systemd1.Unit" && property == "LoadState" {
		return dbus.MakeVariant("loaded"), nil
	}
	return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{iface + "." + property})
}

func (s *initStandIn) close() {
	if s != nil {
		s.conn.Close()
	}
}

// Shutdown shuts the node's operating system down as `systemctl poweroff`
// does: it asks logind to power off. logind announces PrepareForShutdown
// to the kubelet, which holds a delay lock, and waits until the lock is
// released (the kubelet has stopped the node's pods) or InhibitDelayMaxSec
// has passed; then it asks the init system to start poweroff.target.
// Shutdown returns then, when the machine would go down: the caller powers
// the node off (Kill). It fails if the kubelet holds no delay lock, since
// the shutdown would then not be graceful.
func (n *Node) Shutdown(ctx context.Context) error {
	n.mu.Lock()
	standIn := n.standIn
	n.mu.Unlock()
	if standIn == nil {
		return fmt.Errorf("shut down %s: not running with GracefulShutdown", n.cfg.Name)
	}
	login := standIn.conn.Object(login1Name, login1Path)
	if err := n.waitKubeletLock(ctx, login); err != nil {
		return fmt.Errorf("shut down %s: %w", n.cfg.Name, err)
	}
	if err := login.CallWithContext(ctx, login1Manager+".PowerOff", 0, false).Err; err != nil {
		return fmt.Errorf("shut down %s: logind PowerOff: %w", n.cfg.Name, err)
	}
	select {
	case <-standIn.poweroff:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shut down %s: logind did not go on to power off: %w", n.cfg.Name, ctx.Err())
	}
}

// inhibitor is one lock in logind's ListInhibitors.
type inhibitor struct {
	What, Who, Why, Mode string
	UID, PID             uint32
}

// waitKubeletLock waits until logind lists the kubelet's shutdown delay
// lock: the kubelet takes it a little after it starts.
func (n *Node) waitKubeletLock(ctx context.Context, login dbus.BusObject) error {
	var last string
	for {
		var locks []inhibitor
		err := login.CallWithContext(ctx, login1Manager+".ListInhibitors", 0).Store(&locks)
		if err != nil {
			return fmt.Errorf("logind ListInhibitors: %w", err)
		}
		for _, l := range locks {
			if l.Who == "kubelet" && l.Mode == "delay" && slices.Contains(strings.Split(l.What, ":"), "shutdown") {
				return nil
			}
		}
		last = fmt.Sprintf("%+v", locks)
		select {
		case <-ctx.Done():
			return fmt.Errorf("the kubelet holds no shutdown delay lock (logind lists %s); see %s: %w", last, n.Log("kubelet"), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
