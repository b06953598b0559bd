package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

const fieldManager = "eip-testenv"

// ApplyFiles server-side applies every object of the YAML files, in order.
func (c *Cluster) ApplyFiles(ctx context.Context, paths ...string) error {
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("apply %s: %w", path, err)
		}
		if err := c.Apply(ctx, b); err != nil {
			return fmt.Errorf("apply %s: %w", path, err)
		}
	}
	return nil
}

// Apply server-side applies every object of a multi-document YAML (or JSON)
// stream, as `kubectl apply --server-side --force-conflicts` would.
func (c *Cluster) Apply(ctx context.Context, manifest []byte) error {
	dyn, err := dynamic.NewForConfig(c.admin)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.client.Discovery()))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var obj unstructured.Unstructured
		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("decode manifest: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("map %s: %w", gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "default"
			}
			ri = dyn.Resource(m.Resource).Namespace(ns)
		}
		if _, err := ri.Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
}
