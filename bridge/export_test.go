package bridge

import "github.com/nats-io/nats.go/micro"

// APIHandlers are the API's handlers of s, INFO, GET, LIST, CANCEL and
// SUBJECTS, for the fuzz test to call without a NATS round trip.
func APIHandlers(s *Service) []func(micro.Request) (any, error) {
	return []func(micro.Request) (any, error){s.apiInfo, s.apiGet, s.apiList, s.apiCancel, s.apiSubjects}
}
