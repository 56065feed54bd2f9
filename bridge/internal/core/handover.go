package core

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// ScanEvents reads the pending messages of the topics keep accepts, after
// the key after (see delaystore.Repository.ScanEvents).
func (s *Service) ScanEvents(after *keys.Key, keep func(uint64) bool, yield func(keys.Key, *delaystore.StoredMessage) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	if err := s.gen.Load().repo.ScanEvents(after, keep, yield); err != nil {
		return unavailable("reading the messages to hand over: %v", err)
	}
	return nil
}

// Import stores messages handed over by another cell, durably, and tells
// the dispatcher of those it stored (see
// delaystore.Repository.Import), returning how many.
func (s *Service) Import(in []delaystore.Imported) (int, error) {
	if err := s.downErr(); err != nil {
		return 0, err
	}
	g := s.gen.Load()
	// NB: under keys made elsewhere, due at any time.
	defer g.disp.Committing(math.MinInt64)()
	stored, err := g.repo.Import(in, delaystore.Sync)
	if errors.Is(err, delaystore.ErrInvalidMessage) {
		return 0, fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
	}
	if err != nil {
		return 0, unavailable("storing the messages handed over: %v", err)
	}
	fire := make(map[keys.Key]int64, len(in))
	for _, m := range in {
		fire[keys.New(m.Key.TopicHash(), 0, m.Msg.EventId)] = m.Msg.FireAtNs
	}
	for _, k := range stored {
		g.disp.Notify(delaystore.Scheduled{Key: k}, fire[keys.New(k.TopicHash(), 0, k.EventID())])
	}
	return len(stored), nil
}

// DropTopics deletes every pending message of the topics keep accepts,
// as messages that go on elsewhere (see dispatch.Dispatcher.DropMany), a
// batch at a time, and returns how many it deleted.
func (s *Service) DropTopics(ctx context.Context, keep func(uint64) bool) (int, error) {
	const batch = 1024
	total := 0
	var after *keys.Key
	for {
		if err := s.downErr(); err != nil {
			return total, err
		}
		g := s.gen.Load()
		var ks []keys.Key
		err := g.repo.ScanEvents(after, keep, func(k keys.Key, _ *delaystore.StoredMessage) bool {
			ks = append(ks, k)
			return len(ks) < batch
		})
		if err != nil {
			return total, unavailable("reading the messages to drop: %v", err)
		}
		if len(ks) == 0 {
			return total, nil
		}
		n, err := g.disp.DropMany(ctx, ks)
		total += n
		if err != nil {
			return total, unavailable("dropping %d messages: %v", len(ks), err)
		}
		after = &ks[len(ks)-1]
	}
}

// ScanSideRecords reads the dead letters and the live duplicate records
// of the topics keep accepts, after the key after (see
// delaystore.Repository.ScanSideRecords).
func (s *Service) ScanSideRecords(after []byte, keep func(uint64) bool, yield func(delaystore.SideRecord) bool) error {
	if err := s.downErr(); err != nil {
		return err
	}
	if err := s.gen.Load().repo.ScanSideRecords(after, keep, s.cfg.Now().UnixNano(), yield); err != nil {
		return unavailable("reading the records to hand over: %v", err)
	}
	return nil
}

// ImportSideRecords stores dead letters and duplicate records handed
// over by another cell, durably, and returns how many it stored now.
func (s *Service) ImportSideRecords(recs []delaystore.SideRecord) (int, error) {
	if err := s.downErr(); err != nil {
		return 0, err
	}
	n, err := s.gen.Load().repo.ImportSideRecords(recs, delaystore.Sync)
	if errors.Is(err, delaystore.ErrInvalidMessage) {
		return 0, fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
	}
	if err != nil {
		return 0, unavailable("storing the records handed over: %v", err)
	}
	return n, nil
}

// DropSideRecords deletes every dead letter and duplicate record of the
// topics keep accepts, as records another cell now holds, a batch at a
// time, and returns how many it deleted.
func (s *Service) DropSideRecords(ctx context.Context, keep func(uint64) bool) (int, error) {
	const batch = 1024
	total := 0
	for {
		if err := s.downErr(); err != nil {
			return total, err
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := s.gen.Load().repo.DropSideRecords(keep, batch, delaystore.Sync)
		total += n
		if err != nil {
			return total, unavailable("dropping the records handed over: %v", err)
		}
		if n < batch {
			return total, nil
		}
	}
}
