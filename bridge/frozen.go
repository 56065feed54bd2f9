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
	// unserved is set while every topic is frozen because the node does
	// not serve (freezeAll), until the serve hook sets what is frozen:
	// nothing moves then, and a refusal says why.
	unserved atomic.Bool
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
	s.frozen.unserved.Store(false)
	if f == nil {
		s.frozen.f.Store(nil)
	} else {
		s.frozen.f.Store(&f)
	}
	s.frozen.gate.Unlock()
	return s.reloadDelivery()
}

// reloadDelivery has the dispatcher read again which topics are frozen or
// held back (see undelivered).
func (s *Service) reloadDelivery() error {
	c := s.core.Load()
	if c == nil {
		return nil
	}
	if d := c.Dispatcher(); d != nil {
		if err := d.ReloadLimits(); err != nil && c.Down() == nil {
			return err
		}
		// A core that is down reads what is frozen when it starts again.
	}
	return nil
}

// frozenKey returns a 503 error when k's topic is frozen.
func (s *Service) frozenKey(k keys.Key) error {
	if s.frozen.frozen(k.TopicHash()) {
		return s.frozenError("the partition of message " + k.Tag())
	}
	return nil
}

// frozenError is the 503 for a request about a frozen topic, whose
// partition part names: it is moving between cells, or this node is
// starting or stopping to serve.
func (s *Service) frozenError(part string) error {
	if s.frozen.unserved.Load() {
		return unavailable("this node is starting or stopping to serve as its cell's leader: try again")
	}
	return unavailable("%s is moving between cells: try again", part)
}
