package core

import (
	"errors"
	"fmt"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// ErrScheduleMoved is returned by Rewrite when the occurrence under k
// went out, or is going out, since it was looked up: the schedule's
// newest occurrence is its successor now, so look it up again.
var ErrScheduleMoved = errors.New("core: the schedule moved on to its next occurrence")

// LookupSchedule finds the key of the occurrence still to plan of the
// recurring schedule of subject named name (its Delay-Id, or the tag of
// its first occurrence), or returns a 404 error.
func (s *Service) LookupSchedule(subject, name string) (keys.Key, error) {
	if err := s.downErr(); err != nil {
		return keys.Key{}, err
	}
	k, err := s.gen.Load().repo.LookupSchedule(subject, name)
	if errors.Is(err, delaystore.ErrNotFound) {
		return k, fmt.Errorf("%w: no recurring schedule of subject %q named %q", wire.ErrNotFound, keys.Clip(subject), keys.Clip(name))
	}
	if err != nil {
		return k, unavailable("looking up schedule %q: %v", keys.Clip(name), err)
	}
	return k, nil
}

// Rewrite changes the occurrence still to plan under k as edit decides
// (see dispatch.Dispatcher.Rewrite), synced, and returns its new key and
// fire time. It returns ErrScheduleMoved when the occurrence is in
// flight or was planned, a 404 when nothing is pending under k, and the
// error of edit unchanged.
func (s *Service) Rewrite(k keys.Key, edit delaystore.RewriteFunc) (keys.Key, int64, error) {
	if err := s.downErr(); err != nil {
		return keys.Key{}, 0, err
	}
	nk, at, err := s.gen.Load().disp.Rewrite(k, edit)
	switch {
	case err == nil:
		return nk, at, nil
	case errors.Is(err, dispatch.ErrInFlight), errors.Is(err, delaystore.ErrPlanned):
		return keys.Key{}, 0, fmt.Errorf("%w: %s", ErrScheduleMoved, k)
	case errors.Is(err, delaystore.ErrNotFound):
		return keys.Key{}, 0, fmt.Errorf("%w: no pending message with tag %s", wire.ErrNotFound, k)
	case errors.Is(err, wire.ErrBadRequest), errors.Is(err, wire.ErrConflict), errors.Is(err, wire.ErrNotFound):
		return keys.Key{}, 0, err
	}
	return keys.Key{}, 0, unavailable("rewriting %s: %v", k, err)
}
