package realnode

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ControllersConfig describes kube-controller-manager and kube-scheduler.
type ControllersConfig struct {
	// Netns is the control-plane namespace, where the API server runs.
	Netns string
	// Dir receives their logs.
	Dir string
	// Kubeconfig is an admin kubeconfig.
	Kubeconfig string
	// CACert signs the API server's certificate (for ServiceAccount token
	// Secrets' ca.crt); SAKey signs ServiceAccount tokens.
	CACert, SAKey string
	Bins          Bins
}

// Controllers are kube-controller-manager and kube-scheduler.
type Controllers struct {
	group cgroup
	procs []*proc
}

// StartControllers starts kube-controller-manager and kube-scheduler. They
// need no waiting: the kubelets register meanwhile.
func StartControllers(cfg ControllersConfig) (*Controllers, error) {
	c := &Controllers{group: cgroup{"/" + cfg.Netns}}
	if err := c.group.create(); err != nil {
		return nil, err
	}
	auth := []string{"--kubeconfig=" + cfg.Kubeconfig, "--authentication-kubeconfig=" + cfg.Kubeconfig,
		"--authorization-kubeconfig=" + cfg.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1"}
	for _, cmd := range [][]string{
		append([]string{"kube-controller-manager", "--secure-port=10257", "--controllers=*",
			"--root-ca-file=" + cfg.CACert, "--service-account-private-key-file=" + cfg.SAKey,
			"--use-service-account-credentials=false"}, auth...),
		append([]string{"kube-scheduler", "--secure-port=10259"}, auth...),
	} {
		p, err := spawn(cfg.Netns, &c.group, filepath.Join(cfg.Dir, cmd[0]+".log"), nil, filepath.Join(cfg.Bins.Kubelet, cmd[0]), cmd[1:]...)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start controllers: %w", err), c.Stop())
		}
		c.procs = append(c.procs, p)
	}
	return c, nil
}

// Stop kills both and removes their cgroup.
func (c *Controllers) Stop() error {
	return c.group.remove()
}
