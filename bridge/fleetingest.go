package bridge

import "github.com/nats-io/nats.go/micro"

// Ingest schedules the message req as the ingest endpoint does, for a
// caller that took it on another subject: a cell of a fleet (package
// bridge/fleet) hands over what it routes to its own service. req's
// subject must be under Config.IngestPrefix.
//
// Unlike the ingest endpoint, a node without its leadership lease answers
// a 503 rather than nothing: the fleet's routes take each request in one
// queue group for the whole fleet, so no leader of a later term gets it as
// well and answers it instead, and silence would leave the publisher
// waiting for its timeout.
func (s *Service) Ingest(req micro.Request) {
	if err := s.answering(); err != nil {
		s.m.ingest.WithLabelValues("unavailable").Inc()
		respondError(req, err)
		return
	}
	s.ingest(req)
}
