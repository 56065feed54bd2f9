package bridge

import (
	"sync/atomic"

	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/delaystore"
)

// Ingest schedules the message req as the ingest endpoint does, for a
// caller that took it on another subject: a cell of a fleet (package
// bridge/fleet) hands over what it routes to its own service. req's
// subject must be under Config.IngestPrefix.
//
// A node without its leadership lease answers a 503 (see answering): the
// fleet's routes take each request in one queue group for the whole
// fleet, so no leader of a later term gets it as well and answers it
// instead, and silence would leave the publisher waiting for its timeout.
func (s *Service) Ingest(req micro.Request) {
	if err := s.answering(); err != nil {
		s.m.ingest.WithLabelValues("unavailable").Inc()
		respondError(req, err)
		return
	}
	s.ingest(req)
}

// IngestBatch schedules each message of reqs as Ingest does, in order.
// Every message is parsed first, then all are handed to the group commit
// at once, so that its next batch takes them all: a cell of a fleet takes
// what a router forwarded as one batch (package bridge/fleet, "Batched
// forwards"), and handed over one by one, the group commit, woken by the
// first, would commit the few it found alone, one more commit, fsync and
// flush of answers for the same messages.
func (s *Service) IngestBatch(reqs []micro.Request) {
	if err := s.answering(); err != nil {
		for _, req := range reqs {
			s.m.ingest.WithLabelValues("unavailable").Inc()
			respondError(req, err)
		}
		return
	}
	parsed := make([]parsedIngest, 0, len(reqs))
	for _, req := range reqs {
		if p, ok := s.parseIngest(req); ok {
			parsed = append(parsed, p)
		}
	}
	s.commitIngestAll(parsed)
}

// commitIngestAll is commitIngest for each of ps, handed to the group
// commit together. The frozen gate is held once for all of them, until
// the last is stored or refused: a second read lock taken while a move
// waits to freeze would wait behind it, and the move behind the first.
func (s *Service) commitIngestAll(ps []parsedIngest) {
	if len(ps) == 0 {
		return
	}
	s.frozen.gate.RLock()
	handed := make([]parsedIngest, 0, len(ps))
	os := make([]delaystore.Once, 0, len(ps))
	dones := make([]core.OnceFunc, 0, len(ps))
	var left atomic.Int64 // the messages handed over and not yet told
	for _, p := range ps {
		if s.refuseFrozen(p.req, p.once.Msg, p.span, false) {
			continue
		}
		handed = append(handed, p)
		os = append(os, p.once)
		dones = append(dones, s.ingestDone(p.req, p.once.Msg, p.span, false, &left))
	}
	if len(os) == 0 {
		s.frozen.gate.RUnlock()
		return
	}
	left.Store(int64(len(os)))
	if err := s.core.Load().ScheduleOnceAll(os, dones); err != nil {
		s.frozen.gate.RUnlock()
		for _, p := range handed {
			s.refuseCommit(p.req, p.span, err, false)
		}
	}
}
