// Command promql reads PromQL expressions, one a line, on
// standard input and prints, for each, the metric names and label names
// its selectors use, as one JSON object a line: the chart's tests check a
// dashboard's queries against what eipd exports with Prometheus's own
// parser.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// selectors is what one expression uses.
type selectors struct {
	Expr string `json:"expr"`
	// Metrics maps each metric name selected to the label names its
	// matchers name; Grouping are the labels of by, without, on and
	// ignoring clauses.
	Metrics  map[string][]string `json:"metrics"`
	Grouping []string            `json:"grouping"`
	Error    string              `json:"error,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	p := parser.NewParser(parser.Options{})
	for in.Scan() {
		s := selectors{Expr: in.Text(), Metrics: map[string][]string{}, Grouping: []string{}}
		expr, err := p.ParseExpr(in.Text())
		if err != nil {
			s.Error = err.Error()
		} else {
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				switch n := n.(type) {
				case *parser.VectorSelector:
					names := []string{}
					for _, m := range n.LabelMatchers {
						if m.Name != labels.MetricName {
							names = append(names, m.Name)
						}
					}
					s.Metrics[n.Name] = append(s.Metrics[n.Name], names...)
				case *parser.AggregateExpr:
					s.Grouping = append(s.Grouping, n.Grouping...)
				case *parser.BinaryExpr:
					if n.VectorMatching != nil {
						s.Grouping = append(s.Grouping, n.VectorMatching.MatchingLabels...)
						s.Grouping = append(s.Grouping, n.VectorMatching.Include...)
					}
				}
				return nil
			})
		}
		for m, names := range s.Metrics {
			slices.Sort(names)
			s.Metrics[m] = slices.Compact(names)
		}
		if err := out.Encode(s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
