package lease

import (
	"strings"
	"time"
)

// BGPSession is one BGP session of a node as its heartbeat reports it.
type BGPSession struct {
	Peer  string `json:"peer"`
	State string `json:"state"`
	// Since is when the session was established; nil when it is not.
	Since *time.Time `json:"since"`
}

// FormatBGPSessions writes sessions for AnnotationBGP:
// "PEER=STATE[@RFC3339 time],…". It changes only when a session does, so
// that a renewal carrying it changes no verdict of the peers.
func FormatBGPSessions(sessions []BGPSession) string {
	parts := make([]string, 0, len(sessions))
	for _, s := range sessions {
		p := s.Peer + "=" + s.State
		if s.Since != nil {
			p += "@" + s.Since.UTC().Format(time.RFC3339)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

// ParseBGPSessions reads AnnotationBGP; malformed entries are skipped.
func ParseBGPSessions(s string) []BGPSession {
	var out []BGPSession
	for _, part := range strings.Split(s, ",") {
		peer, rest, ok := strings.Cut(part, "=")
		if !ok || peer == "" {
			continue
		}
		state, since, hasSince := strings.Cut(rest, "@")
		sess := BGPSession{Peer: peer, State: state}
		if t, err := time.Parse(time.RFC3339, since); hasSince && err == nil {
			sess.Since = &t
		}
		out = append(out, sess)
	}
	return out
}
