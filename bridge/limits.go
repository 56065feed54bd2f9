package bridge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"natsdelay/bridge/wire"
	"natsdelay/delaystore"
	"natsdelay/dispatch"
	"natsdelay/keys"
)

// maxRate and maxBurst bound a limit's rate and burst: far above what one
// service delivers, so a larger one is a mistake rather than a wish.
const (
	maxRate  = 1_000_000
	maxBurst = 1_000_000
)

// checkPattern accepts a subject pattern as a filter: a subject, or one
// with * and > wildcards.
func checkPattern(p string) error {
	if p == "" {
		return badRequest(`"pattern" is required: a subject or a filter such as orders.> or tenant.*.mail`)
	}
	if err := checkFilter(p); err != nil {
		return badRequest("%s", strings.Replace(strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "), `"filter"`, `"pattern"`, 1))
	}
	return nil
}

// checkLimit reports what is wrong with l, all at once.
func (s *Service) checkLimit(l wire.Limit) error {
	if err := checkPattern(l.Pattern); err != nil {
		return err
	}
	if bad := limitProblems(l, s.cfg.Delivery.MaxInFlight); len(bad) > 0 {
		return badRequest("limit of %q: %s", keys.Clip(l.Pattern), strings.Join(bad, "; "))
	}
	return nil
}

// CheckLimit reports what is wrong with l, one problem each, worded as
// LIMITS.SET words them, for a service whose in-flight window is window
// (0: the default): for a program that checks limits before it starts a
// service, as serve does those of its config file. Nil means l is fine.
func CheckLimit(l wire.Limit, window int) []string {
	if err := checkPattern(l.Pattern); err != nil {
		return []string{strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": ")}
	}
	return limitProblems(l, window)
}

// limitProblems is what is wrong with the fields of l, its pattern aside.
func limitProblems(l wire.Limit, window int) []string {
	if window == 0 {
		window = dispatch.DefaultConfig().MaxInFlight
	}
	var bad []string
	if l.MaxInFlight < 0 || l.MaxInFlight > window {
		bad = append(bad, fmt.Sprintf(`"max_in_flight" %d: want 1 to the in-flight window, %d, or 0 for the default share`, l.MaxInFlight, window))
	}
	if l.Rate < 0 || l.Rate > maxRate {
		bad = append(bad, fmt.Sprintf(`"rate" %g: want messages per second, more than 0 and at most %d, or 0 for none`, l.Rate, maxRate))
	}
	if l.Burst < 0 || l.Burst > maxBurst {
		bad = append(bad, fmt.Sprintf(`"burst" %d: want 1 to %d, or 0 for a tenth of a second's worth`, l.Burst, maxBurst))
	} else if l.Burst > 0 && l.Rate == 0 {
		bad = append(bad, fmt.Sprintf(`"burst" %d without "rate": a burst is of a rate`, l.Burst))
	}
	return bad
}

func (s *Service) apiLimitsSet(req micro.Request) (any, error) {
	var l wire.Limit
	if err := decodeRequest(req.Data(), &l); err != nil {
		return nil, err
	}
	if err := s.checkLimit(l); err != nil {
		return nil, err
	}
	if err := s.core.Load().SetLimit(StoredLimit(l)); err != nil {
		return nil, err
	}
	return l, nil
}

func (s *Service) apiLimitsGet(req micro.Request) (any, error) {
	pattern, l, err := s.limitOf(req)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: no limit for %q", wire.ErrNotFound, keys.Clip(pattern))
	}
	return wireLimit(*l), nil
}

func (s *Service) apiLimitsList(req micro.Request) (any, error) {
	var empty struct{}
	if err := decodeRequest(req.Data(), &empty); err != nil {
		return nil, err
	}
	ls, err := s.core.Load().Limits()
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(ls, func(a, b delaystore.Limit) int { return dispatch.MoreSpecific(a.Pattern, b.Pattern) })
	out := wire.LimitsReply{Limits: make([]wire.Limit, 0, len(ls))}
	for _, l := range ls {
		out.Limits = append(out.Limits, wireLimit(l))
	}
	return out, nil
}

func (s *Service) apiLimitsDelete(req micro.Request) (any, error) {
	var r wire.PatternRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	if err := checkPattern(r.Pattern); err != nil {
		return nil, err
	}
	ok, err := s.core.Load().DeleteLimit(r.Pattern)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: no limit for %q", wire.ErrNotFound, keys.Clip(r.Pattern))
	}
	return wire.DeletedReply{Deleted: true}, nil
}

// apiPause pauses a pattern: its limit, or a new one, gets paused.
func (s *Service) apiPause(req micro.Request) (any, error) { return s.setPaused(req, true) }

// apiResume resumes a pattern; a limit left with nothing else set is
// deleted.
func (s *Service) apiResume(req micro.Request) (any, error) { return s.setPaused(req, false) }

func (s *Service) setPaused(req micro.Request, paused bool) (any, error) {
	pattern, l, err := s.limitOf(req)
	if err != nil {
		return nil, err
	}
	if l == nil {
		l = &delaystore.Limit{Pattern: pattern}
	}
	l.Paused = paused
	c := s.core.Load()
	if *l == (delaystore.Limit{Pattern: l.Pattern}) {
		if _, err := c.DeleteLimit(l.Pattern); err != nil {
			return nil, err
		}
	} else if err := c.SetLimit(*l); err != nil {
		return nil, err
	}
	return wireLimit(*l), nil
}

// limitOf reads the pattern a request names and its stored limit, nil if
// it has none.
func (s *Service) limitOf(req micro.Request) (string, *delaystore.Limit, error) {
	var r wire.PatternRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return "", nil, err
	}
	if err := checkPattern(r.Pattern); err != nil {
		return "", nil, err
	}
	ls, err := s.core.Load().Limits()
	if err != nil {
		return "", nil, err
	}
	for _, l := range ls {
		if l.Pattern == r.Pattern {
			return r.Pattern, &l, nil
		}
	}
	return r.Pattern, nil, nil
}

// StoredLimit is l as the store keeps it.
func StoredLimit(l wire.Limit) delaystore.Limit {
	return delaystore.Limit{Pattern: l.Pattern, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Burst: l.Burst, Paused: l.Paused}
}

func wireLimit(l delaystore.Limit) wire.Limit {
	return wire.Limit{Pattern: l.Pattern, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Burst: l.Burst, Paused: l.Paused}
}
