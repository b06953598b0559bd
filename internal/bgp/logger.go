package bgp

import (
	"context"
	"log/slog"
)

// quieter hands GoBGP's logs to eipd's handler one level down for Info:
// GoBGP's Info is chatty (one line per connection attempt to an
// unreachable peer), so it is logged at Debug; session changes are logged
// by the Speaker itself.
type quieter struct{ slog.Handler }

func (h quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, lower(l))
}

func (h quieter) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lower(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h quieter) WithAttrs(as []slog.Attr) slog.Handler { return quieter{h.Handler.WithAttrs(as)} }
func (h quieter) WithGroup(name string) slog.Handler    { return quieter{h.Handler.WithGroup(name)} }

func lower(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}
