package raftstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// newRaftLogger adapts Raft's hclog logging to log: hclog formats nothing
// (its own output is discarded) and hands each entry, with its key-value
// pairs, to a sink that logs it with slog at the level that tells an
// operator the truth (see levelOf).
func newRaftLogger(log *slog.Logger) hclog.Logger {
	level := hclog.Info
	if log.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   "raft",
		Level:  level,
		Output: io.Discard,
	})
	l.RegisterSink(&slogSink{log: log, level: level, peers: newPeerLimit(peerWarnInterval)})
	return l
}

type slogSink struct {
	log   *slog.Logger
	level hclog.Level
	peers *peerLimit
}

func (s *slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < s.level {
		return
	}
	l := levelOf(level, msg, args)
	if _, perPeer := peerFailures[msg]; perPeer && l >= slog.LevelWarn {
		ok, held := s.peers.allow(msg, peerOf(args), time.Now())
		if !ok {
			return
		}
		if held > 0 {
			args = append(args, "held_back", held)
		}
	}
	s.log.Log(context.Background(), l, msg, append(formatArgs(args), "logger", name)...)
}

// peerFailures are Raft's messages about one peer it cannot reach. A dead
// peer makes Raft repeat them every heartbeat backoff (about 0.6 s) for
// as long as it is down; it is news once, and then a reminder at a
// bounded rate (see peerLimit). They are warnings: the cluster serves on
// with a quorum, which Raft's "failed to contact quorum" tells otherwise,
// and an election goes on with the votes of the peers it reaches.
var peerFailures = map[string]struct{}{
	"failed to heartbeat to":                  {},
	"failed to appendEntries to":              {},
	"failed to pipeline appendEntries":        {},
	"failed to start pipeline replication to": {},
	"failed to send snapshot to":              {},
	"failed to contact":                       {},
	"failed to make requestVote RPC":          {},
}

// levelOf is the slog level of one of Raft's messages: its own, but
// warnings for a peer out of reach, and debug for the transport's reads
// that end because this node closed the connection (a clean stop).
func levelOf(level hclog.Level, msg string, args []any) slog.Level {
	switch {
	case level <= hclog.Debug:
		return slog.LevelDebug
	case level == hclog.Info:
		return slog.LevelInfo
	case closedConnection(msg, args):
		return slog.LevelDebug
	case level == hclog.Warn:
		return slog.LevelWarn
	}
	if _, ok := peerFailures[msg]; ok {
		return slog.LevelWarn
	}
	return slog.LevelError
}

// closedConnection reports whether msg is the transport's report of a
// read, a reply or an accept that ended because the connection or the
// listener was closed here: what a stop does, not a fault.
func closedConnection(msg string, args []any) bool {
	switch msg {
	case "failed to decode incoming command", "failed to flush response", "failed to accept connection":
	default:
		return false
	}
	for i := 1; i < len(args); i += 2 {
		if err, ok := args[i].(error); ok && closedErr(err) {
			return true
		}
	}
	return false
}

// closedErr reports whether err says that the connection was closed on
// this side: the transport (raft.ErrTransportShutdown), the socket
// (net.ErrClosed, which some wrappers keep only as text) or the pipe a
// guarded connection reads through (see frames.go).
func closedErr(err error) bool {
	return errors.Is(err, raft.ErrTransportShutdown) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe) ||
		strings.Contains(err.Error(), net.ErrClosed.Error()) || strings.Contains(err.Error(), io.ErrClosedPipe.Error())
}

// peerOf is the peer a message of peerFailures is about: the value of its
// "peer", "server-id" or (a vote request's) "target" pair, formatted.
func peerOf(args []any) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "peer" || k == "server-id" || k == "target" {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

// peerWarnInterval is the least time between two logs of one message
// about one peer.
const peerWarnInterval = 30 * time.Second

// peerLimit lets the first log of each (message, peer) through, and then
// one per interval, counting those it holds back (see nats-server
// server/log.go RateLimitWarnf, and dispatch's warnLimit). It is safe for
// concurrent use. It holds one entry per message and peer: a bounded set,
// as the peers are the cluster's.
type peerLimit struct {
	interval time.Duration
	mu       sync.Mutex
	next     map[[2]string]peerWarn
}

type peerWarn struct {
	at   time.Time // before which logs are held back
	held uint64
}

func newPeerLimit(interval time.Duration) *peerLimit {
	return &peerLimit{interval: interval, next: map[[2]string]peerWarn{}}
}

// allow reports whether msg about peer may be logged at now and, if so,
// how many were held back since the last that was.
func (p *peerLimit) allow(msg, peer string, now time.Time) (bool, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := [2]string{msg, peer}
	w := p.next[k]
	if now.Before(w.at) {
		w.held++
		p.next[k] = w
		return false, 0
	}
	p.next[k] = peerWarn{at: now.Add(p.interval)}
	return true, w.held
}

// formatArgs formats the values given as hclog.Fmt, a verb and its
// arguments, which hclog's own output formats and slog would print as a
// list. args is changed in place.
func formatArgs(args []any) []any {
	for i, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 {
			if verb, ok := f[0].(string); ok {
				args[i] = fmt.Sprintf(verb, f[1:]...)
			}
		}
	}
	return args
}
