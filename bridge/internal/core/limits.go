package core

import (
	"fmt"

	"github.com/natsdelay/natsdelay/delaystore"
)

// SetLimit stores l, replacing the limit of its pattern, and puts it in
// force. It returns once the write is committed (by a quorum, in a
// cluster), so the limit survives a restart and a change of leader.
func (s *Service) SetLimit(l delaystore.Limit) error {
	if err := s.unavailable(); err != nil {
		return err
	}
	g := s.gen.Load()
	if err := g.repo.SetLimit(l); err != nil {
		return unavailable("storing the limit of %q: %v", l.Pattern, err)
	}
	return s.reloadLimits(g)
}

// DeleteLimit removes the limit of pattern, and reports whether there
// was one.
func (s *Service) DeleteLimit(pattern string) (bool, error) {
	if err := s.unavailable(); err != nil {
		return false, err
	}
	g := s.gen.Load()
	ok, err := g.repo.DeleteLimit(pattern)
	if err != nil {
		return false, unavailable("deleting the limit of %q: %v", pattern, err)
	}
	return ok, s.reloadLimits(g)
}

// Limits returns every stored limit, in pattern order.
func (s *Service) Limits() ([]delaystore.Limit, error) {
	if err := s.downErr(); err != nil {
		return nil, err
	}
	ls, err := s.gen.Load().repo.Limits()
	if err != nil {
		return nil, unavailable("reading the limits: %v", err)
	}
	return ls, nil
}

// seedLimits stores each of ls whose pattern has no stored limit (see
// Config.Limits), before the dispatcher reads them.
func seedLimits(repo *delaystore.Repository, ls []delaystore.Limit) error {
	if len(ls) == 0 {
		return nil
	}
	stored, err := repo.Limits()
	if err != nil {
		return fmt.Errorf("core: seed the limits: %w", err)
	}
	have := make(map[string]bool, len(stored))
	for _, l := range stored {
		have[l.Pattern] = true
	}
	for _, l := range ls {
		if have[l.Pattern] {
			continue
		}
		if err := repo.SetLimit(l); err != nil {
			return fmt.Errorf("core: seed the limit of %q: %w", l.Pattern, err)
		}
	}
	return nil
}

func (s *Service) reloadLimits(g *generation) error {
	if err := g.disp.ReloadLimits(); err != nil {
		return unavailable("%v", err)
	}
	return nil
}
