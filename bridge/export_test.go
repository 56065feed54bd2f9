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
