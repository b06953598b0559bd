package cli

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/eip-project/eip/internal/listwatch"
)

// readSnapshot reads everything status needs with five requests, sent at
// once: a list of eip's Leases, a list of Services in every namespace, a
// get of the ConfigMap, a list of Nodes and one of the EndpointSlices in
// every namespace. There are no per-IP requests,
// so the cost does not grow with the number of IPs beyond the size of the
// lists, and the wait is that of the longest list.
func readSnapshot(ctx context.Context, c kubernetes.Interface, l lists, namespace, configMap string) (snapshot, error) {
	s := snapshot{namespace: namespace, configMap: configMap}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		if s.leases, s.locks, err = l.leases(ctx, namespace, metav1.ListOptions{LabelSelector: listwatch.LeaseSelector}); err != nil {
			return fmt.Errorf("list leases in %s: %w", namespace, err)
		}
		return nil
	})
	g.Go(func() error {
		var err error
		if s.services, s.claims, err = l.services(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("list services: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		cm, err := c.CoreV1().ConfigMaps(namespace).Get(ctx, configMap, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("get configmap %s/%s: %w", namespace, configMap, err)
		default:
			s.cm = cm
		}
		return nil
	})
	g.Go(func() error {
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		s.nodes = make([]*corev1.Node, len(nodes.Items))
		for i := range nodes.Items {
			s.nodes[i] = &nodes.Items[i]
		}
		return nil
	})
	g.Go(func() error {
		// Where Services with externalTrafficPolicy: Local have ready
		// endpoints, and the API server's addresses, which the daemons
		// never bind. A user who may not read them sees such an address
		// as the daemons' events describe it, and no reason of
		// endpoints.
		eps, err := c.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsForbidden(err):
		case err != nil:
			return fmt.Errorf("list endpointslices: %w", err)
		default:
			s.endpointSlices = make([]*discoveryv1.EndpointSlice, len(eps.Items))
			for i := range eps.Items {
				s.endpointSlices[i] = &eps.Items[i]
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return snapshot{namespace: namespace, configMap: configMap}, err
	}
	return s, nil
}
