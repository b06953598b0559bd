package cli

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/lease"
)

// VersionOptions are `kubectl eip version`'s flags: the plugin's build,
// then, unless Client, each node's eipd build as its heartbeat says.
type VersionOptions struct {
	env    *env
	build  string
	Client bool

	invocation
}

func newVersionCommand(e *env, build string) *cobra.Command {
	o := &VersionOptions{env: e, build: build}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and every node's eipd version",
		Long: `Print the version, commit and Go release of this plugin, then of the eipd on
each node, as that eipd writes it in its heartbeat Lease. A node whose eipd
writes none shows "unknown".`,
		Example: `  kubectl eip version
  kubectl eip version --client`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	cmd.Flags().BoolVar(&o.Client, "client", false, "print the plugin's version only, without asking the API server")
	return cmd
}

// Complete takes the namespace from the flags.
func (o *VersionOptions) Complete(args []string) error {
	o.complete(o.env, args)
	return nil
}

// Validate accepts everything Complete took.
func (o *VersionOptions) Validate() error { return nil }

// Run prints the plugin's build, then a table of the nodes' eipd builds.
func (o *VersionOptions) Run(ctx context.Context) error {
	fmt.Fprintf(o.env.Out, "kubectl-eip %s\n", o.build)
	if o.Client {
		return nil
	}
	c, err := o.env.newClient()
	if err != nil {
		return err
	}
	list, err := c.CoordinationV1().Leases(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: lease.RoleLabel + "=" + lease.RoleHeartbeat})
	if err != nil {
		return fmt.Errorf("list eipd heartbeats in namespace %s: %w", o.namespace, err)
	}
	var rows [][]string
	for i := range list.Items {
		node, ok := lease.NodeOf(list.Items[i].Name)
		if !ok {
			continue
		}
		build := list.Items[i].Annotations[lease.AnnotationBuild]
		rows = append(rows, []string{node, orUnknown(build)})
	}
	if len(rows) == 0 {
		return fmt.Errorf("no eipd heartbeat in namespace %s: is eip installed there (-n names another)?", o.namespace)
	}
	slices.SortFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	var b bytes.Buffer
	writeTable(&b, []string{"NODE", "EIPD"}, rows)
	_, err = o.env.Out.Write(b.Bytes())
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
