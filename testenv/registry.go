package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/eip-project/eip/testenv/realnode"
)

// registryDir records every cluster on the machine, so that namespaces a
// crashed run left behind can be found and removed. It lives on /run,
// which like the namespaces themselves does not survive a reboot.
const registryDir = "/run/eip-testenv"

// State describes a cluster for another process: to use it (testenv up) or
// to tear it down (testenv down, Sweep).
type State struct {
	ID         string   `json:"id"`
	Dir        string   `json:"dir"`
	Namespaces []string `json:"namespaces"`
	// Owner is the pid of the process that started the cluster; unless
	// Detached, the cluster is stale once that process is gone.
	Owner       int    `json:"owner"`
	Detached    bool   `json:"detached"`
	Kubeconfig  string `json:"kubeconfig"`
	Kubectl     string `json:"kubectl"`
	ClientNetns string `json:"clientNetns"`
	Nodes       []Node `json:"nodes,omitempty"`
}

// State returns the cluster's description.
func (c *Cluster) State() State {
	s := State{
		ID: c.id, Dir: c.dir, Namespaces: c.plannedNamespaces(),
		Owner: os.Getpid(), Detached: c.opts.Detach,
		Kubeconfig: c.AdminKubeconfig(), Kubectl: c.KubectlPath(),
		ClientNetns: c.nsName("client"), Nodes: c.Nodes(),
	}
	return s
}

// plannedNamespaces names every namespace the cluster creates, including
// those it has not created yet.
func (c *Cluster) plannedNamespaces() []string {
	names := []string{c.nsName("lan"), c.nsName("cp"), c.nsName("client")}
	for i := 1; i <= c.opts.Nodes; i++ {
		names = append(names, c.nsName(fmt.Sprintf("n%d", i)))
	}
	if c.opts.Router {
		names = append(names, c.nsName("rt"), c.nsName("rcl"), c.nsName("fd"))
	}
	return names
}

// StatePath is the cluster's entry in the machine's registry of clusters.
func (c *Cluster) StatePath() string { return statePath(c.id) }

func statePath(id string) string { return filepath.Join(registryDir, id+".json") }

func (c *Cluster) writeState() error {
	if err := os.MkdirAll(registryDir, 0o755); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	b, err := json.MarshalIndent(c.State(), "", "  ")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.WriteFile(c.StatePath(), b, 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// ReadStates lists the clusters recorded on this machine.
func ReadStates() ([]State, error) {
	entries, err := os.ReadDir(registryDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cluster registry: %w", err)
	}
	var states []State
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(registryDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read cluster registry: %w", err)
		}
		var s State
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("read cluster registry %s: %w", e.Name(), err)
		}
		states = append(states, s)
	}
	return states, nil
}

// Stale reports whether the cluster's owner is gone and nobody else will
// tear it down.
func (s State) Stale() bool {
	if s.Detached {
		return false
	}
	err := syscall.Kill(s.Owner, 0)
	return errors.Is(err, syscall.ESRCH)
}

// Sweep tears down every stale cluster (see State.Stale) and returns their
// ids. Start calls it, so a crashed test run is cleaned up by the next one.
func Sweep() ([]string, error) {
	states, err := ReadStates()
	if err != nil {
		return nil, err
	}
	var swept []string
	var errs error
	for _, s := range states {
		if !s.Stale() {
			continue
		}
		if err := Teardown(s); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		swept = append(swept, s.ID)
	}
	return swept, errs
}

// Teardown removes a cluster that its own process cannot close (detached,
// or left by a crash): it kills the processes in its namespaces, deletes
// them, and removes its run directory and registry entry.
func Teardown(s State) error {
	errs := realnode.Remove(s.Dir, s.Namespaces) // real nodes' cgroups and mounts, if any
	errs = errors.Join(errs, deleteNamespaces(s.Namespaces))
	if s.Dir != "" {
		if err := os.RemoveAll(s.Dir); err != nil {
			errs = errors.Join(errs, fmt.Errorf("remove run dir: %w", err))
		}
	}
	if err := os.Remove(statePath(s.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = errors.Join(errs, fmt.Errorf("remove state: %w", err))
	}
	return errs
}

// CloseOnInterrupt closes the cluster and exits the process with status 130
// on SIGINT or SIGTERM, so that an interrupted test run leaves nothing
// behind. Call the returned function to stop watching.
func (c *Cluster) CloseOnInterrupt() (stop func()) {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigc:
			fmt.Fprintf(os.Stderr, "%s: closing cluster %s\n", sig, c.id)
			if err := c.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigc)
		close(done)
	}
}
