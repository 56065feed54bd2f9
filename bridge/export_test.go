package bridge

import "github.com/nats-io/nats.go/micro"

// Pending is the number of messages pending in s's store, from its
// subject registry, without INFO's counts by due window.
func Pending(s *Service) uint64 { return s.core.Load().Repository().Pending() }

// APIHandlers are the API's handlers of s, INFO, GET, LIST, CANCEL and
// SUBJECTS, for the fuzz test to call without a NATS round trip.
func APIHandlers(s *Service) []func(micro.Request) (any, error) {
	return []func(micro.Request) (any, error){s.apiInfo, s.apiGet, s.apiList, s.apiCancel, s.apiSubjects}
}

// SetBulkBounds sets the entries a bulk step reads at most and the size of
// its reply's sample, so that a test makes steps stop on their bound at
// small sizes and sees every message a step selected. restore puts back
// the bounds; the test must not run in parallel with others.
func SetBulkBounds(scanned, sample int) (restore func()) {
	oldScanned, oldSample := maxScanned, bulkSampleSize
	maxScanned, bulkSampleSize = scanned, sample
	return func() { maxScanned, bulkSampleSize = oldScanned, oldSample }
}

// IngestHandler is the handler of s's ingest endpoint, for a benchmark
// to call without a NATS round trip.
func IngestHandler(s *Service) func(micro.Request) { return s.handleIngest }

// OnDrainHeld makes f be called each time a Drain of s has its hold in
// force; call it before the Drain.
func OnDrainHeld(s *Service, f func()) { s.held.inForce = f }
