package core

import (
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// Move gives the pending message under k the fire time to chooses,
// committed with sync, and returns its new key and fire time. It answers 404 when k is not
// pending, 409 when it is in flight (see dispatch.Dispatcher.Move), and
// the error of to unchanged.
func (s *Service) Move(k keys.Key, to delaystore.MoveFunc, movedBy string, sync delaystore.SyncMode) (keys.Key, int64, error) {
	if err := s.downErr(); err != nil {
		return keys.Key{}, 0, err
	}
	var fireAtNs int64
	nk, err := s.gen.Load().disp.Move(k, func(m *delaystore.StoredMessage) (int64, error) {
		at, err := to(m)
		fireAtNs = at
		return at, err
	}, movedBy, sync)
	switch {
	case err == nil:
		return nk, fireAtNs, nil
	case errors.Is(err, dispatch.ErrInFlight):
		return keys.Key{}, 0, fmt.Errorf("%w: %s is in flight: delivered and not yet settled; its answer decides it, so try again once it is settled", wire.ErrConflict, k)
	case errors.Is(err, delaystore.ErrNotFound):
		return keys.Key{}, 0, fmt.Errorf("%w: no pending message with tag %s", wire.ErrNotFound, k)
	case errors.Is(err, wire.ErrBadRequest), errors.Is(err, wire.ErrConflict), errors.Is(err, wire.ErrNotFound):
		return keys.Key{}, 0, err
	}
	return keys.Key{}, 0, unavailable("moving %s: %v", k, err)
}
