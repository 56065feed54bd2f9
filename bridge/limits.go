package bridge

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
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
	return append(bad, groupProblems(l)...)
}

// groupProblems is what is wrong with the grouping of l (whole,
// key_header).
func groupProblems(l wire.Limit) []string {
	switch h := l.KeyHeader; {
	case h == "":
		return nil
	case l.Whole:
		return []string{`"whole" and "key_header": want one of them, the subjects together or each value of the header`}
	case len(h) > maxKeyHeader || !validHeaderName(h):
		return []string{fmt.Sprintf(`"key_header" %q: want a header name of printable ASCII without ':', at most %d bytes`, keys.Clip(h), maxKeyHeader)}
	case isControl(h) || strings.HasPrefix(strings.ToLower(h), strings.ToLower(wire.HeaderDelay+"-")):
		return []string{fmt.Sprintf(`"key_header" %q: a control header is not kept with the message; want a header of the publisher's, such as Tenant`, keys.Clip(h))}
	}
	return nil
}

// maxKeyHeader bounds a key header's name.
const maxKeyHeader = 256

// validHeaderName reports whether h can be a NATS header name: printable
// ASCII without ':' or spaces.
func validHeaderName(h string) bool {
	for i := 0; i < len(h); i++ {
		if c := h[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return false
		}
	}
	return true
}

func (s *Service) apiLimitsSet(req micro.Request) (any, error) {
	var l wire.Limit
	if err := decodeRequest(req.Data(), &l); err != nil {
		return nil, err
	}
	return s.SetLimit(l)
}

// SetLimit is LIMITS.SET: it stores l, replacing the limit of its
// pattern, and returns it.
func (s *Service) SetLimit(l wire.Limit) (wire.Limit, error) {
	if err := s.answering(); err != nil {
		return wire.Limit{}, err
	}
	if err := s.checkLimit(l); err != nil {
		return wire.Limit{}, err
	}
	if err := s.core.Load().SetLimit(StoredLimit(l)); err != nil {
		return wire.Limit{}, err
	}
	return l, nil
}

func (s *Service) apiLimitsGet(req micro.Request) (any, error) {
	pattern, err := patternOf(req)
	if err != nil {
		return nil, err
	}
	l, err := s.limitOf(pattern)
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
	return s.Limits()
}

// Limits is LIMITS.LIST: every limit, the most specific pattern first.
func (s *Service) Limits() (wire.LimitsReply, error) {
	if err := s.answering(); err != nil {
		return wire.LimitsReply{}, err
	}
	ls, err := s.core.Load().Limits()
	if err != nil {
		return wire.LimitsReply{}, err
	}
	slices.SortStableFunc(ls, func(a, b delaystore.Limit) int { return dispatch.MoreSpecific(a.Pattern, b.Pattern) })
	out := wire.LimitsReply{Limits: make([]wire.Limit, 0, len(ls))}
	for _, l := range ls {
		out.Limits = append(out.Limits, wireLimit(l))
	}
	return out, nil
}

// limitTable is the stored limits, the most specific pattern first: the
// order in which the dispatcher finds the one limit of a subject.
type limitTable []delaystore.Limit

// pauses is the stored limits of c as a limitTable.
func pauses(c *core.Service) (limitTable, error) {
	ls, err := c.Limits()
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(ls, func(a, b delaystore.Limit) int { return dispatch.MoreSpecific(a.Pattern, b.Pattern) })
	return ls, nil
}

// of is the pattern whose limit pauses subject, empty when none does: as
// in the dispatcher, only the most specific pattern that matches it
// applies, so a resumed orders.a under a paused orders.> is not paused.
func (t limitTable) of(subject string) string {
	for _, l := range t {
		if dispatch.SubjectMatches(l.Pattern, subject) {
			if l.Paused {
				return l.Pattern
			}
			return ""
		}
	}
	return ""
}

func (s *Service) apiLimitsDelete(req micro.Request) (any, error) {
	var r wire.PatternRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	if err := s.DeleteLimit(r.Pattern); err != nil {
		return nil, err
	}
	return wire.DeletedReply{Deleted: true}, nil
}

// DeleteLimit is LIMITS.DELETE: it removes the limit of pattern, a
// wire.ErrNotFound if there is none.
func (s *Service) DeleteLimit(pattern string) error {
	if err := s.answering(); err != nil {
		return err
	}
	if err := checkPattern(pattern); err != nil {
		return err
	}
	ok, err := s.core.Load().DeleteLimit(pattern)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: no limit for %q", wire.ErrNotFound, keys.Clip(pattern))
	}
	return nil
}

// apiPause pauses a pattern: its limit, or a new one, gets paused.
func (s *Service) apiPause(req micro.Request) (any, error) {
	pattern, err := patternOf(req)
	if err != nil {
		return nil, err
	}
	return s.Pause(pattern)
}

// apiResume resumes a pattern; a limit left with nothing else set is
// deleted.
func (s *Service) apiResume(req micro.Request) (any, error) {
	pattern, err := patternOf(req)
	if err != nil {
		return nil, err
	}
	return s.Resume(pattern)
}

// Pause is PAUSE: the limit of pattern, or a new one, gets paused.
func (s *Service) Pause(pattern string) (wire.Limit, error) { return s.setPaused(pattern, true) }

// Resume is RESUME: the limit of pattern is no longer paused, and is
// deleted when nothing else is set in it.
func (s *Service) Resume(pattern string) (wire.Limit, error) { return s.setPaused(pattern, false) }

func (s *Service) setPaused(pattern string, paused bool) (wire.Limit, error) {
	if err := s.answering(); err != nil {
		return wire.Limit{}, err
	}
	l, err := s.limitOf(pattern)
	if err != nil {
		return wire.Limit{}, err
	}
	if l == nil {
		l = &delaystore.Limit{Pattern: pattern}
	}
	l.Paused = paused
	c := s.core.Load()
	if *l == (delaystore.Limit{Pattern: l.Pattern}) {
		if _, err := c.DeleteLimit(l.Pattern); err != nil {
			return wire.Limit{}, err
		}
	} else if err := c.SetLimit(*l); err != nil {
		return wire.Limit{}, err
	}
	return wireLimit(*l), nil
}

// patternOf reads the pattern a request names.
func patternOf(req micro.Request) (string, error) {
	var r wire.PatternRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return "", err
	}
	return r.Pattern, nil
}

// limitOf checks pattern and reads its stored limit, nil if it has none.
func (s *Service) limitOf(pattern string) (*delaystore.Limit, error) {
	if err := checkPattern(pattern); err != nil {
		return nil, err
	}
	ls, err := s.core.Load().Limits()
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		if l.Pattern == pattern {
			return &l, nil
		}
	}
	return nil, nil
}

// StoredLimit is l as the store keeps it.
func StoredLimit(l wire.Limit) delaystore.Limit {
	return delaystore.Limit{Pattern: l.Pattern, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Burst: l.Burst, Paused: l.Paused,
		Whole: l.Whole, KeyHeader: l.KeyHeader}
}

func wireLimit(l delaystore.Limit) wire.Limit {
	return wire.Limit{Pattern: l.Pattern, MaxInFlight: l.MaxInFlight, Rate: l.Rate, Burst: l.Burst, Paused: l.Paused,
		Whole: l.Whole, KeyHeader: l.KeyHeader}
}
