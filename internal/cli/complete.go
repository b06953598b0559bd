package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

// Shell completion reads the cluster the way status does (four list or get
// requests) and offers what the command would accept: for status every IP
// it would show, for move first the IPs that can move, then the nodes that
// could take that IP. Each choice carries a short description, which zsh
// and fish show next to it.

// completeFrom returns a ValidArgsFunction that reads the status and hands
// it, with the arguments typed so far, to choices.
func (e *env) completeFrom(choices func(st Status, args []string) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		st, err := e.readStatus(ctx)
		if err != nil {
			cobra.CompErrorln(err.Error())
			return nil, cobra.ShellCompDirectiveError
		}
		var out []string
		for _, c := range choices(st, args) {
			if strings.HasPrefix(c, toComplete) {
				out = append(out, c)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// readStatus reads the cluster and builds the status as of now.
func (e *env) readStatus(ctx context.Context) (Status, error) {
	_, s, err := e.connect(ctx, e.eipNamespace())
	if err != nil {
		return Status{}, err
	}
	return buildStatus(s, e.clock.Now()), nil
}

// statusChoices: every IP status shows that is not typed yet.
func statusChoices(st Status, args []string) []string {
	var out []string
	for _, r := range st.IPs {
		if !slices.Contains(args, r.IP) {
			out = append(out, r.IP+"\t"+ipDescription(r))
		}
	}
	return out
}

// moveChoices: first the IPs that have a lock and are managed, then the
// live eligible nodes other than that IP's holder.
func moveChoices(st Status, args []string) []string {
	var out []string
	switch len(args) {
	case 0:
		for _, r := range st.IPs {
			if movable(r) {
				out = append(out, r.IP+"\t"+ipDescription(r))
			}
		}
	case 1:
		holder := ""
		for _, r := range st.IPs {
			if r.IP == args[0] {
				holder = r.Holder
			}
		}
		for _, n := range st.Nodes {
			if n.Alive && n.Eligible && n.Name != holder {
				out = append(out, fmt.Sprintf("%s\talive, holds %d", n.Name, n.Holds))
			}
		}
	}
	return out
}

// movable says whether move would accept the IP (planMove's checks on the
// row; the node is checked with the second argument).
func movable(r IP) bool {
	switch r.State {
	case StateOutOfRange, StateRefused, StateOrphan:
		return false
	}
	return r.Lock != ""
}

// ipDescription is the state and the holder, as status shows them.
func ipDescription(r IP) string {
	if r.Holder == "" {
		return string(r.State)
	}
	return string(r.State) + " on " + escapeControls(r.Holder)
}
