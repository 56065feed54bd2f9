package bridge

import "github.com/nats-io/nats.go/micro"

// Ingest schedules the message req as the ingest endpoint does, for a
// caller that took it on another subject: a cell of a fleet (package
// bridge/fleet) hands over what it routes to its own service. req's
// subject must be under Config.IngestPrefix.
func (s *Service) Ingest(req micro.Request) { s.handleIngest(req) }
