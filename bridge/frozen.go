package bridge

import (
	"sync"
	"sync/atomic"

	"github.com/natsdelay/natsdelay/keys"
)

// frozenTopics are the topics the service holds still, for a cell of a
// fleet that hands partitions to another cell or does not own them (see
// package bridge/fleet). Nothing changes their messages here while they
// are frozen: ingest and the API verbs that name one of their messages
// answer 503, retryable; the dispatcher neither delivers nor redelivers
// them; answers to their deliveries are dropped, as if they never came
// (the message stays as it was, to be delivered again where it goes).
type frozenTopics struct {
	// gate is held for reading by each ingest from its check to its
	// commit, so that SetFrozen returns only once every message accepted
	// before it is stored.
	gate sync.RWMutex
	f    atomic.Pointer[func(topicHash uint64) bool]
}

// WithFrozen freezes the topics f names from the start, before the first
// delivery (see SetFrozen).
func WithFrozen(f func(topicHash uint64) bool) Option {
	return func(s *Service) {
		if f != nil {
			s.frozen.f.Store(&f)
		}
	}
}

// frozen reports whether the topic is frozen now.
func (z *frozenTopics) frozen(topicHash uint64) bool {
	f := z.f.Load()
	return f != nil && (*f)(topicHash)
}

// SetFrozen makes f say which topics are frozen, by their hash, from now
// on; nil freezes none. It returns once every message whose ingest was
// accepted before is stored, and the dispatcher has been told, so that
// what the store holds of a topic frozen now changes no more but by
// expiry. f is called often and under locks: it must be quick.
func (s *Service) SetFrozen(f func(topicHash uint64) bool) error {
	s.frozen.gate.Lock()
	if f == nil {
		s.frozen.f.Store(nil)
	} else {
		s.frozen.f.Store(&f)
	}
	s.frozen.gate.Unlock()
	c := s.core.Load()
	if c == nil {
		return nil
	}
	if d := c.Dispatcher(); d != nil {
		if err := d.ReloadLimits(); err != nil && c.Down() == nil {
			return err
		}
		// A core that is down reads f when it starts again.
	}
	return nil
}

// frozenKey returns a 503 error when k's topic is frozen.
func (s *Service) frozenKey(k keys.Key) error {
	if s.frozen.frozen(k.TopicHash()) {
		return unavailable("the partition of message %s is moving between cells: try again", k.Tag())
	}
	return nil
}
