package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eip-project/eip/internal/config"
)

// ConfigCheckOptions are the flags of `kubectl eip config check`.
type ConfigCheckOptions struct {
	*env
	// File is a manifest holding the ConfigMap; "-" is standard input;
	// empty means the cluster's ConfigMap.
	File string

	invocation
}

func newConfigCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check eip's configuration",
	}
	cmd.AddCommand(newConfigCheckCommand(e))
	return cmd
}

func newConfigCheckCommand(e *env) *cobra.Command {
	o := &ConfigCheckOptions{env: e}
	cmd := &cobra.Command{
		Use:   "check [-f FILE]",
		Short: "Check eip's ConfigMap as eipd would, before or after it is applied",
		Long: `Check eip's ConfigMap with the parser eipd uses: from a manifest (-f; "-" reads
standard input), or as it is in the cluster. Each problem is printed with its
file and line (or its key and line in the cluster), what is wrong and how to
fix it; the command exits non-zero when there is any, so that it can guard a
CI job or a GitOps pre-commit hook. A manifest may hold several documents: the
ConfigMap named by --config-map is checked.

Unknown keys are problems: eipd ignores them, and the API server's admission
policy refuses them. A value without effect (fence-after with api-loss hold)
is a warning only.`,
		Example: `  kubectl eip config check -f manifests/configmap.yaml
  kustomize build overlays/prod | kubectl eip config check -f -
  kubectl eip config check`,
		Args: cobra.NoArgs,
		RunE: runE(o),
	}
	cmd.Flags().StringVarP(&o.File, "filename", "f", "", `manifest holding the ConfigMap ("-" for standard input); default: the cluster's`)
	return cmd
}

// Complete takes the namespace from the flags.
func (o *ConfigCheckOptions) Complete(args []string) error {
	o.complete(o.env, args)
	return nil
}

// Validate has nothing to check beyond cobra's: no arguments.
func (o *ConfigCheckOptions) Validate() error { return nil }

// Run reads the ConfigMap, prints its problems and warnings, and fails when
// there is a problem.
func (o *ConfigCheckOptions) Run(ctx context.Context) error {
	src, err := o.read(ctx)
	if err != nil {
		return err
	}
	problems, warnings := config.Check(src.data)
	for _, p := range problems {
		fmt.Fprintf(o.Out, "%s: %s\n  fix: %s\n", src.where(p.Key, p.Line), p.What(), p.Fix)
	}
	for _, w := range warnings {
		key, _, _ := strings.Cut(w, " ")
		fmt.Fprintf(o.Out, "%s: warning: %s\n", src.where(key, 0), w)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %d problem%s: eipd would keep its last good configuration, and the API server would refuse it",
			src.name, len(problems), plural(len(problems)))
	}
	fmt.Fprintf(o.Out, "%s: valid\n", src.name)
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// configSource is a ConfigMap's data and where each key was read.
type configSource struct {
	// name is the file, or namespace/name in the cluster.
	name string
	data map[string]string
	// lines maps a key to the line of its value's first line in the file
	// (block scalars: the line before); nil for the cluster.
	lines map[string]int
}

// where names the line of a file that holds a key's value, or line of
// it, as FILE:LINE; in the cluster, the ConfigMap (the message names the
// key and the line within its value).
func (s configSource) where(key string, line int) string {
	first, ok := s.lines[key]
	if !ok {
		return s.name
	}
	return fmt.Sprintf("%s:%d", s.name, first+max(line, 1)-1)
}

func (o *ConfigCheckOptions) read(ctx context.Context) (configSource, error) {
	if o.File == "" {
		c, err := o.newClient()
		if err != nil {
			return configSource{}, err
		}
		cm, err := c.CoreV1().ConfigMaps(o.namespace).Get(ctx, o.configMap, metav1.GetOptions{})
		if err != nil {
			return configSource{}, fmt.Errorf("read ConfigMap %s/%s: %w", o.namespace, o.configMap, err)
		}
		return configSource{name: o.namespace + "/" + o.configMap, data: cm.Data}, nil
	}
	var b []byte
	var err error
	if o.File == "-" {
		b, err = io.ReadAll(o.In)
	} else {
		b, err = os.ReadFile(o.File)
	}
	if err != nil {
		return configSource{}, fmt.Errorf("read %s: %w", o.File, err)
	}
	name := o.File
	if name == "-" {
		name = "<stdin>"
	}
	return findConfigMap(b, name, o.configMap)
}

// manifest is the part of a document findConfigMap reads.
type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
}

// findConfigMap finds the ConfigMap named cm among the YAML documents of b
// and the line of each of its keys' values.
func findConfigMap(b []byte, file, cm string) (configSource, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return configSource{}, fmt.Errorf("%s holds no ConfigMap named %s (see --config-map)", file, cm)
		}
		if err != nil {
			return configSource{}, fmt.Errorf("read %s: %w", file, err)
		}
		var m manifest
		if err := doc.Decode(&m); err != nil || m.Kind != "ConfigMap" || m.Metadata.Name != cm {
			continue
		}
		src := configSource{name: file, data: map[string]string{}, lines: map[string]int{}}
		data := mappingValue(doc.Content[0], "data")
		if data == nil {
			return src, nil
		}
		for i := 0; i+1 < len(data.Content); i += 2 {
			k, v := data.Content[i], data.Content[i+1]
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
				return configSource{}, fmt.Errorf("%s:%d: data.%s is not a string: quote it (a ConfigMap holds only strings)", file, v.Line, k.Value)
			}
			src.data[k.Value] = v.Value
			src.lines[k.Value] = v.Line
			if v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				// The value's first line follows the | or > indicator.
				src.lines[k.Value]++
			}
		}
		return src, nil
	}
}

// mappingValue returns the value of key in the mapping node n, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
