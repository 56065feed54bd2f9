package bridge

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// A delivery to a subject that a JetStream stream captures is answered by
// the stream, not by a consumer: with a PubAck once it stored the message,
// or with an error when it did not (no space, a limit, a wrong expected
// sequence). The PubAck settles the delivery as an ACK does; the error is
// a failed attempt, delivered again after its back-off (the ack wait
// without one), counted by the stream's err_code, and its words logged. With Nats-Msg-Id
// on every delivery (see headerMsgID), the stream stores it once however
// often it comes.

// Stream answer results, the label of stream_answers_total.
const (
	streamStored    = "stored"
	streamDuplicate = "duplicate"
	streamError     = "error"
)

// streamAnswer is what a stream answers a publish with.
type streamAnswer struct {
	Stream    string   `json:"stream"`
	Seq       *uint64  `json:"seq"`
	Duplicate bool     `json:"duplicate"`
	Error     *jsError `json:"error"`
}

// jsError is a JetStream API error.
type jsError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

// parseStreamAnswer reports whether p is a stream's answer: a JSON object
// with a stream and a sequence (a PubAck), or with an error.
func parseStreamAnswer(p []byte) (streamAnswer, bool) {
	var a streamAnswer
	p = bytes.TrimSpace(p)
	if len(p) == 0 || p[0] != '{' || json.Unmarshal(p, &a) != nil {
		return a, false
	}
	if a.Error != nil {
		return a, a.Error.Code != 0 || a.Error.Description != ""
	}
	return a, a.Stream != "" && a.Seq != nil
}

// handleStreamAnswer settles the delivery key on a stream's PubAck, and
// fails the attempt on a stream's error.
func (s *Service) handleStreamAnswer(c *core.Service, key keys.Key, a streamAnswer) {
	if a.Error != nil && (a.Error.ErrCode == wire.JSErrScheduleSchedulerInvalid || a.Error.ErrCode == jsErrSchedulesDisabled) {
		s.learnStream(c, key)
	}
	if a.Error != nil {
		s.m.streamAnswers.WithLabelValues(streamError).Inc()
		s.m.streamErrors.WithLabelValues(errCodeLabel(a.Error.ErrCode)).Inc()
		if ok, n := s.streamWarn.allow(s.cfg.Now()); ok {
			s.log.Warn("a stream refused a delivery: it is delivered again after its back-off",
				"tag", key, "code", a.Error.Code, "err_code", a.Error.ErrCode, "error", keys.Clip(a.Error.Description), "suppressed", n)
		}
		failed := dispatch.Ack{Kind: dispatch.AckFailed, Reason: keys.Clip(a.Error.Description)}
		if err := s.ackTraced(c, key, failed); err != nil {
			s.log.Debug("failing an attempt the stream refused", "tag", key, "err", err)
		}
		return
	}
	result := streamStored
	if a.Duplicate {
		result = streamDuplicate
	}
	s.m.streamAnswers.WithLabelValues(result).Inc()
	if err := s.ackTraced(c, key, dispatch.Ack{Kind: dispatch.AckDone}); err != nil {
		s.log.Debug("settling a delivery the stream stored", "tag", key, "err", err)
	}
}

// ackTraced applies a stream's answer a to the delivery key, with no
// answer to send back, and records its span when the delivery was traced.
func (s *Service) ackTraced(c *core.Service, key keys.Key, a dispatch.Ack) error {
	var end func(error)
	if s.tracer != nil {
		end = s.tracer.answer(key, a)
	}
	if end == nil {
		return c.Ack(key, a, nil)
	}
	err := c.Ack(key, a, end)
	if err != nil {
		end(err)
	}
	return err
}

// jsErrSchedulesDisabled is the err_code of a stream without message
// schedules that is sent Nats-Schedule-Next.
const jsErrSchedulesDisabled = 10188

// learnStream is told of a stream that refused the firing key of a
// JetStream schedule for its Nats-Scheduler or Nats-Schedule-Next: a
// stream made after the schedule was taken in captures its target. The
// firing's redelivery, and every later firing to that target, leaves
// them out, so the stream's PubAck settles it.
func (s *Service) learnStream(c *core.Service, key keys.Key) {
	m, err := c.Get(key)
	if err != nil || m.GetRecurrence().GetJsScheduler() == "" {
		return
	}
	if s.pub.jsStreams.add(m.Subject) {
		s.log.Info("a stream captures the target of a JetStream schedule: its firings go without Nats-Scheduler and Nats-Schedule-Next",
			"subject", keys.Clip(m.Subject), "schedule", keys.Clip(m.Recurrence.JsScheduler))
	}
}

// maxStreamTargets bounds streamTargets: past it, it starts over, which
// costs each target one refused firing more.
const maxStreamTargets = 4096

// streamTargets is a bounded set of subjects, safe for concurrent use.
type streamTargets struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (t *streamTargets) has(subject string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[subject]
	return ok
}

// add adds subject and reports whether it was new.
func (t *streamTargets) add(subject string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[subject]; ok {
		return false
	}
	if t.m == nil || len(t.m) >= maxStreamTargets {
		t.m = make(map[string]struct{})
	}
	t.m[subject] = struct{}{}
	return true
}
