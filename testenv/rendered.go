package testenv

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// Rendered is one object of a rendered manifest, as plain data.
type Rendered = map[string]any

// DecodeRendered decodes a YAML stream (manifests, `helm template`) into its
// objects, keyed "Kind namespace/name". An object that does not parse, or a
// key seen twice, is an error: two objects of one name would overwrite each
// other when applied.
func DecodeRendered(stream string) (map[string]Rendered, error) {
	out := map[string]Rendered{}
	for _, doc := range strings.Split(stream, "\n---") {
		var o Rendered
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			return nil, fmt.Errorf("decode %q: %w", doc, err)
		}
		if len(o) == 0 {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v/%v", o["kind"], meta["namespace"], meta["name"])
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s rendered twice", key)
		}
		out[key] = o
	}
	return out, nil
}

// Path walks plain data by map key (a string step) and list index (an int
// step); it is nil where the path leads nowhere.
func Path(v any, steps ...any) any {
	for _, s := range steps {
		switch k := s.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}
