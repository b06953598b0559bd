package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/eip-project/eip/internal/kubeclient/clientset"
	"github.com/eip-project/eip/internal/listwatch"
)

// watchRecheck is how often --watch re-judges liveness when nothing was
// written: a heartbeat that stops changing produces no event.
const watchRecheck = time.Second

// StatusOptions are the flags and arguments of `kubectl eip status`.
type StatusOptions struct {
	*env
	Output string
	Watch  bool
	// Ranges prints how full each range is instead of the IPs.
	Ranges bool

	invocation
	ips []netip.Addr
}

func newStatusCommand(e *env) *cobra.Command {
	o := &StatusOptions{env: e}
	cmd := &cobra.Command{
		Use:   "status [IP...]",
		Short: "Show which node holds each external IP",
		Long: `Show one row per external IP: the Services naming it, the node holding its
lock, how it is bound, its state, whether the holder is alive, the time since
it last moved and how often it moved. Below: every node's heartbeat, and any
problem with the ConfigMap.

States: bound (a live node holds it), moving (a move is pending), unbound (no
live holder: no lock yet, or its holder died and the live nodes take it
over), out-of-range (named by a Service outside every range: never bound),
refused (a node's own address, a special address, a range kept for other
namespaces, or spec.externalIPs with external-ips off: never bound), orphan
(a lock no Service names any more: being deleted), no-endpoints (a Service
with externalTrafficPolicy: Local names it and no node has a ready endpoint
of it: not bound). For such a Service REASON names the nodes with a ready
endpoint, the only ones that may hold its IP. A Service refused an IP that
another namespace's Service holds is named in the REASON of its row.

ALIVE means the holder's heartbeat was renewed within its lease duration,
judged on this machine's clock.

With --ranges: one row per range of the ConfigMap, with how many addresses
it holds (CAPACITY), how many Services were given (ALLOCATED) and of those
how many a live holder binds (BOUND), how many are left (FREE) and how many
eip never binds (RESERVED: the network and broadcast addresses of an IPv4
CIDR, the nodes' and the API server's own addresses).`,
		Example: `  kubectl eip status
  kubectl eip status 198.18.100.1 -o wide
  kubectl eip status -o json | jq '.ips[] | select(.state != "bound")'
  kubectl eip status --watch
  kubectl eip status --ranges`,
		ValidArgsFunction: e.completeFrom(statusChoices),
		RunE:              runE(o),
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "output format: wide, json or yaml (schema in docs/status-schema.md)")
	cmd.Flags().BoolVarP(&o.Watch, "watch", "w", false, "print the status again whenever it changes")
	cmd.Flags().BoolVar(&o.Ranges, "ranges", false, "print how full each range is instead of the IPs")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputWide, outputJSON, outputYAML}, cobra.ShellCompDirectiveNoFileComp)) // fails only for an unknown flag
	return cmd
}

// Complete takes the arguments and the namespace from the flags.
func (o *StatusOptions) Complete(args []string) error {
	o.complete(o.env, args)
	return nil
}

// Validate checks the arguments and flags before any request.
func (o *StatusOptions) Validate() error {
	switch o.Output {
	case outputTable, outputWide, outputJSON, outputYAML:
	default:
		return fmt.Errorf("unknown output format %q: use wide, json or yaml", o.Output)
	}
	if o.Ranges && len(o.args) > 0 {
		return fmt.Errorf("--ranges takes no IP arguments: it reports every range")
	}
	var err error
	o.ips, err = parseIPs(o.args)
	return err
}

// parseIPs reads IP arguments, each as parseIP does.
func parseIPs(args []string) ([]netip.Addr, error) {
	ips := make([]netip.Addr, 0, len(args))
	for _, a := range args {
		ip, err := parseIP(a)
		if err != nil {
			return nil, err
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// parseIP reads an IP argument; IPv4-mapped IPv6 addresses are their IPv4.
func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	return ip.Unmap(), nil
}

// Run connects to the cluster and prints the status once, or on every
// change with --watch.
func (o *StatusOptions) Run(ctx context.Context) error {
	c, err := o.newClient()
	if err != nil {
		return err
	}
	if o.Watch {
		return o.watch(ctx, c)
	}
	s, err := o.read(ctx, c, o.namespace)
	if err != nil {
		return err
	}
	st, missing := filterIPs(buildStatus(s, o.clock.Now()), o.ips)
	if err := o.print(st); err != nil {
		return err
	}
	return missing
}

// print writes st, or its ranges with --ranges, in the output format.
func (o *StatusOptions) print(st Status) error {
	if o.Ranges {
		return printRanges(o.Out, rangeReport(st), o.Output)
	}
	return printStatus(o.Out, st, o.Output)
}

// watch keeps informers on what status reads and prints the status again
// when it changed. Ages and renew times alone are no change, or a table
// would be printed every renew interval.
func (o *StatusOptions) watch(ctx context.Context, c kubernetes.Interface) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(changed) },
		UpdateFunc: func(any, any) { poke(changed) },
		DeleteFunc: func(any) { poke(changed) },
	}
	ns := o.namespace
	set := listwatch.For(clientset.Adapt(c), ns, o.configMap)
	leases := informer(ctx, c, &coordinationv1.Lease{}, notify, set.Leases)
	services := informer(ctx, c, &corev1.Service{}, notify, set.Services)
	configMaps := informer(ctx, c, &corev1.ConfigMap{}, notify, set.ConfigMap)
	nodes := informer(ctx, c, &corev1.Node{}, notify, set.Nodes)
	eps := informer(ctx, c, &discoveryv1.EndpointSlice{}, notify, set.EndpointSlices)
	if !cache.WaitForCacheSync(ctx.Done(), leases.HasSynced, services.HasSynced, configMaps.HasSynced, nodes.HasSynced, eps.HasSynced) {
		if err := ctx.Err(); err != nil {
			return nil // interrupted
		}
		return fmt.Errorf("watch: caches did not sync")
	}
	ticker := o.clock.NewTicker(watchRecheck)
	defer ticker.Stop()
	var last string
	for {
		s := snapshot{
			namespace: ns,
			configMap: o.configMap,
			leases:    items[*coordinationv1.Lease](leases.GetStore()),
			services:  items[*corev1.Service](services.GetStore()),
			nodes:     items[*corev1.Node](nodes.GetStore()),

			endpointSlices: items[*discoveryv1.EndpointSlice](eps.GetStore()),
		}
		for _, cm := range items[*corev1.ConfigMap](configMaps.GetStore()) {
			if cm.Name == o.configMap && cm.Namespace == ns {
				s.cm = cm
			}
		}
		st, _ := filterIPs(buildStatus(s, o.clock.Now()), o.ips)
		if key := o.changeKey(st); key != last {
			if last != "" && o.Output != outputJSON && o.Output != outputYAML {
				fmt.Fprintln(o.Out)
			}
			if o.Output == outputYAML && last != "" {
				fmt.Fprintln(o.Out, "---")
			}
			if err := o.print(st); err != nil {
				return err
			}
			last = key
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C():
		}
	}
}

// changeKey is what o prints of st without what changes by itself (the
// time, renew times), so that --watch prints only when something an
// operator cares about did.
func (o *StatusOptions) changeKey(st Status) string {
	st.ObservedAt = time.Time{}
	if o.Ranges {
		b, _ := json.Marshal(rangeReport(st)) // a RangeReport always encodes
		return string(b)
	}
	st.Nodes = append([]Node(nil), st.Nodes...)
	for i := range st.Nodes {
		st.Nodes[i].LastRenewTime = nil
	}
	b, _ := json.Marshal(st) // a Status always encodes
	return string(b)
}

func poke(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// informer runs an informer over lw with client c. Passing c lets the
// reflector know whether c can stream lists (a fake cannot).
func informer(ctx context.Context, c kubernetes.Interface, example runtime.Object, h cache.ResourceEventHandler, lw *cache.ListWatch) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c), example, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(h) // fails only after the informer stopped
	go inf.RunWithContext(ctx)
	return inf
}

func items[T any](s cache.Store) []T {
	all := s.List()
	out := make([]T, 0, len(all))
	for _, o := range all {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
