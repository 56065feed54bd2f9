package bridge

import "github.com/nats-io/nats.go/micro"

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
// Every message is parsed before the first is handed to the group
// commit, so that the batch reaches it in one burst and is committed
// together: a cell of a fleet takes what a router forwarded as one batch
// (package bridge/fleet, "Batched forwards"), and handing its messages
// over one parse apart would let the group commit wake for the first and
// commit it alone, one more commit, fsync and flush of answers for the
// same messages.
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
	for _, p := range parsed {
		s.commitIngest(p.req, p.once, p.span, false)
	}
}
