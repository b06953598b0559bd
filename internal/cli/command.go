package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Defaults of the flags naming where eip lives.
const (
	// DefaultNamespace is eip's namespace in the manifests; -n overrides it.
	DefaultNamespace = "eip-system"
	// DefaultConfigMap is the name of eip's ConfigMap.
	DefaultConfigMap = "eip-config"
)

// env is what every command needs: where to connect, where to print, and
// the clock.
type env struct {
	genericiooptions.IOStreams
	flags     *genericclioptions.ConfigFlags
	configMap string
	clock     clock.WithTicker
	// newClient builds the API client; tests return a fake clientset.
	newClient func() (kubernetes.Interface, error)
	// lists reads the lists that grow with the IPs through a client of
	// newClient: streamed from a real API server; tests, whose fake
	// clientset has no HTTP client to stream from, list typed objects.
	lists func(kubernetes.Interface) lists
}

func newEnv(streams genericiooptions.IOStreams) *env {
	e := &env{
		IOStreams: streams,
		flags:     genericclioptions.NewConfigFlags(true),
		configMap: DefaultConfigMap,
		clock:     clock.RealClock{},
		lists:     func(c kubernetes.Interface) lists { return streamed{c} },
	}
	e.newClient = func() (kubernetes.Interface, error) {
		cfg, err := e.flags.ToRESTConfig()
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig: %w", err)
		}
		// Protobuf: listing 10,000 Leases decodes several times faster
		// than JSON. Every type eip reads is built in.
		cfg.ContentType = runtime.ContentTypeProtobuf
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("create client: %w", err)
		}
		return c, nil
	}
	return e
}

// eipNamespace is eip's namespace: -n when given, else DefaultNamespace. The
// kubeconfig context's namespace is deliberately not used: it says where the
// user works, not where eip is installed.
func (e *env) eipNamespace() string {
	if ns := e.flags.Namespace; ns != nil && *ns != "" {
		return *ns
	}
	return DefaultNamespace
}

// connect builds the API client and reads the state of eip installed in
// namespace through it.
func (e *env) connect(ctx context.Context, namespace string) (kubernetes.Interface, snapshot, error) {
	c, err := e.newClient()
	if err != nil {
		return nil, snapshot{}, err
	}
	s, err := e.read(ctx, c, namespace)
	return c, s, err
}

// read reads the state of eip installed in namespace through c.
func (e *env) read(ctx context.Context, c kubernetes.Interface, namespace string) (snapshot, error) {
	return readSnapshot(ctx, c, e.lists(c), namespace, e.configMap)
}

// invocation is what every subcommand takes from its command line before
// validating: the arguments and eip's namespace.
type invocation struct {
	args      []string
	namespace string
}

// complete takes the arguments and the namespace from the flags.
func (i *invocation) complete(e *env, args []string) {
	i.args = args
	i.namespace = e.eipNamespace()
}

// options is a subcommand's flags and arguments, run the kubectl way:
// complete, validate, then run.
type options interface {
	Complete(args []string) error
	Validate() error
	Run(ctx context.Context) error
}

// runE runs o as a cobra command's RunE.
func runE(o options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}

// NewCommand returns the kubectl-eip command tree, printing to streams.
// version is the plugin's build (buildinfo.Info's String), printed by
// --version and `kubectl eip version`.
func NewCommand(streams genericiooptions.IOStreams, version string) *cobra.Command {
	return newRootCommand(newEnv(streams), version)
}

func newRootCommand(e *env, version string) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-eip",
		Short: "Show and move eip's external IPs",
		Long: `Show and move the external IPs that eip binds on the cluster's nodes.

eip's Leases and ConfigMap live in the namespace given by -n/--namespace,
default ` + DefaultNamespace + ` (not the kubeconfig context's namespace).`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl eip"},
	}
	root.SetVersionTemplate("kubectl-eip {{.Version}}\n")
	// Declared here so that cobra does not claim -v, which kubectl users
	// know as verbosity.
	root.Flags().Bool("version", false, "print the version and exit")
	root.SetIn(e.In)
	root.SetOut(e.Out)
	root.SetErr(e.ErrOut)
	e.flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().Lookup("namespace").Usage = "namespace of eip's Leases and ConfigMap (default " + DefaultNamespace + ")"
	root.PersistentFlags().StringVar(&e.configMap, "config-map", e.configMap, "name of eip's ConfigMap")
	root.AddCommand(newStatusCommand(e), newMoveCommand(e), newCheckCommand(e), newVersionCommand(e, version), newConfigCommand(e))
	return root
}
