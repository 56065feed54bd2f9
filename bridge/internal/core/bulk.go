package core

import (
	"context"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// CancelMany cancels the pending messages under ks at once (see
// dispatch.Dispatcher.CancelMany) and returns how many were pending.
func (s *Service) CancelMany(ctx context.Context, ks []keys.Key) (int, error) {
	if err := s.downErr(); err != nil {
		return 0, err
	}
	n, err := s.gen.Load().disp.CancelMany(ctx, ks)
	if err != nil {
		return n, unavailable("canceling %d messages: %v", len(ks), err)
	}
	return n, nil
}

// InFlight reports whether the message under k is delivered and not yet
// settled.
func (s *Service) InFlight(k keys.Key) bool {
	d := s.gen.Load().disp
	return d != nil && d.InFlight(k)
}

// ScanDue yields the keys of pending messages from the due index, in due
// order, after *after (all when nil), up to the time bucket maxBucket,
// until yield returns false.
func (s *Service) ScanDue(after *keys.Key, maxBucket uint64, yield func(keys.Key) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	if err := s.gen.Load().repo.ScanDue(after, maxBucket, yield); err != nil {
		return unavailable("reading the due index: %v", err)
	}
	return nil
}

// ScanTopic yields the pending messages of topicHash with keys in [from,
// upper) (see delaystore.Repository.ScanTopic), each with the attempt of
// a delivery in flight.
func (s *Service) ScanTopic(topicHash uint64, from, upper []byte, yield func(keys.Key, *delaystore.StoredMessage) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	g := s.gen.Load()
	err := g.repo.ScanTopic(topicHash, from, upper, func(k keys.Key, m *delaystore.StoredMessage) bool {
		m.Attempt = max(m.Attempt, g.disp.Attempt(k))
		return yield(k, m)
	})
	if err != nil {
		return unavailable("reading messages: %v", err)
	}
	return nil
}

// Replay schedules the dead letters under ks again, due at nowNs, to
// their subjects or to target (see delaystore.Repository.Replay), and
// tells the dispatcher of the new messages.
func (s *Service) Replay(ks []keys.Key, target string, nowNs int64) ([]delaystore.Replayed, error) {
	if err := s.downErr(); err != nil {
		return nil, err
	}
	g := s.gen.Load()
	defer g.disp.Committing(nowNs)()
	res, err := g.repo.Replay(ks, target, nowNs, delaystore.Sync)
	if err != nil {
		return nil, unavailable("replaying %d dead letters: %v", len(ks), err)
	}
	for _, r := range res {
		if r.Done {
			g.disp.Notify(r.Scheduled, r.Msg.FireAtNs)
		}
	}
	return res, nil
}

// DeleteDead deletes the dead letters under ks, synced, and returns how
// many there were.
func (s *Service) DeleteDead(ks []keys.Key) (int, error) {
	if err := s.downErr(); err != nil {
		return 0, err
	}
	deleted, err := s.gen.Load().repo.DeleteDead(ks, delaystore.Sync)
	if err != nil {
		return 0, unavailable("deleting %d dead letters: %v", len(ks), err)
	}
	n := 0
	for _, d := range deleted {
		if d {
			n++
		}
	}
	return n, nil
}

// Flush makes the deletes and updates committed without sync durable,
// and lets the messages moved without sync go out (see
// dispatch.Dispatcher.Flush).
func (s *Service) Flush() error {
	if err := s.downErr(); err != nil {
		return err
	}
	if err := s.gen.Load().disp.Flush(); err != nil {
		return unavailable("flushing: %v", err)
	}
	return nil
}
