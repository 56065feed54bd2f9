package core

import (
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// GetDead returns the dead letter kept under k, the tag the message had,
// or a 404 error. It is the caller's.
func (s *Service) GetDead(k keys.Key) (*delaystore.DeadLetter, error) {
	if err := s.downErr(); err != nil {
		return nil, err
	}
	dl, err := s.gen.Load().repo.GetDead(k)
	if errors.Is(err, delaystore.ErrNotFound) {
		return nil, fmt.Errorf("%w: no dead letter with tag %s", wire.ErrNotFound, k)
	}
	if err != nil {
		return nil, unavailable("reading dead letter %s: %v", k, err)
	}
	return dl, nil
}

// ScanDead yields the dead letters in key order after the key *after (all
// when nil), of topicHash alone when oneTopic is set, until yield returns
// false (see delaystore.Repository.ScanDead).
func (s *Service) ScanDead(topicHash uint64, oneTopic bool, after *keys.Key, yield func(keys.Key, *delaystore.DeadLetter) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	if err := s.gen.Load().repo.ScanDead(topicHash, oneTopic, after, yield); err != nil {
		return unavailable("listing dead letters: %v", err)
	}
	return nil
}

// ScanDeadTopics yields the subjects with dead letters and their counts,
// in subject order, from the first at or after from, until yield returns
// false.
func (s *Service) ScanDeadTopics(from string, yield func(delaystore.DeadTopic) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	if err := s.gen.Load().repo.ScanDeadTopics(from, yield); err != nil {
		return unavailable("listing subjects with dead letters: %v", err)
	}
	return nil
}

// DeadFor is the number of dead letters of subject.
func (s *Service) DeadFor(subject string) (uint64, error) {
	if err := s.downErr(); err != nil {
		return 0, err
	}
	n, err := s.gen.Load().repo.DeadFor(subject)
	if err != nil {
		return 0, unavailable("counting dead letters of %q: %v", keys.Clip(subject), err)
	}
	return n, nil
}
