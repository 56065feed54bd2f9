package bridge

import (
	"context"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// What a cell of a fleet (package bridge/fleet) uses to hand a partition
// to another cell: it freezes the partition's topics (SetFrozen), reads
// their messages (ScanEvents), the other cell stores them under the same
// keys (Import), and once that cell owns them it deletes its copies
// (DropTopics).

// ScanEvents yields the pending messages of the topics keep accepts, after
// the key after (from the first when nil), in key order, until yield
// returns false.
func (s *Service) ScanEvents(after *keys.Key, keep func(topicHash uint64) bool, yield func(keys.Key, *delaystore.StoredMessage) bool) error {
	return s.core.Load().ScanEvents(after, keep, yield)
}

// Import stores messages another cell hands over, durably, under the keys
// they had there, once however often they are sent, and returns how many
// it stored now.
func (s *Service) Import(in []delaystore.Imported) (int, error) {
	return s.core.Load().Import(in)
}

// DropTopics deletes every pending message of the topics keep accepts, as
// messages another cell now holds, and returns how many.
func (s *Service) DropTopics(ctx context.Context, keep func(topicHash uint64) bool) (int, error) {
	return s.core.Load().DropTopics(ctx, keep)
}

// ScanSideRecords yields the dead letters and the live duplicate records
// of the topics keep accepts, after the key after (from the first when
// nil), in key order, until yield returns false.
func (s *Service) ScanSideRecords(after []byte, keep func(topicHash uint64) bool, yield func(delaystore.SideRecord) bool) error {
	return s.core.Load().ScanSideRecords(after, keep, yield)
}

// ImportSideRecords stores dead letters and duplicate records another
// cell hands over, durably, once however often they are sent, and returns
// how many it stored now.
func (s *Service) ImportSideRecords(recs []delaystore.SideRecord) (int, error) {
	return s.core.Load().ImportSideRecords(recs)
}

// DropSideRecords deletes every dead letter and duplicate record of the
// topics keep accepts, as records another cell now holds, and returns how
// many.
func (s *Service) DropSideRecords(ctx context.Context, keep func(topicHash uint64) bool) (int, error) {
	return s.core.Load().DropSideRecords(ctx, keep)
}
