package bgp

import (
	"log/slog"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
)

// logger hands GoBGP's logs to slog. GoBGP's Info is chatty (one line per
// connection attempt to an unreachable peer), so it is logged at Debug;
// session changes are logged by the Speaker itself.
type logger struct{ log *slog.Logger }

var _ gobgplog.Logger = logger{}

func (l logger) attrs(f gobgplog.Fields) []any {
	out := make([]any, 0, 2*len(f))
	for k, v := range f {
		out = append(out, k, v)
	}
	return out
}

func (l logger) Panic(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...) }
func (l logger) Fatal(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...) }
func (l logger) Error(msg string, f gobgplog.Fields) { l.log.Error(msg, l.attrs(f)...) }
func (l logger) Warn(msg string, f gobgplog.Fields)  { l.log.Warn(msg, l.attrs(f)...) }
func (l logger) Info(msg string, f gobgplog.Fields)  { l.log.Debug(msg, l.attrs(f)...) }
func (l logger) Debug(msg string, f gobgplog.Fields) { l.log.Debug(msg, l.attrs(f)...) }

func (logger) SetLevel(gobgplog.LogLevel) {}

func (logger) GetLevel() gobgplog.LogLevel { return gobgplog.InfoLevel }
