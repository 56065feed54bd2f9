package bridge

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/keys"
)

// maxScanned bounds the entries one page of a filtered listing or one step
// of a bulk verb reads: a filter that matches little of a large range
// answers a short page, or none, with a cursor to go on from, rather than
// read the whole range in one request. A variable so that a test can make
// steps stop on it at small sizes.
var maxScanned = 10_000

// deadRetention is the retention INFO reports.
func deadRetention(d time.Duration) string {
	switch {
	case d < 0:
		return "forever"
	case d == 0:
		return (7 * 24 * time.Hour).String()
	}
	return d.String()
}

func deadLetterInfo(k keys.Key, dl *delaystore.DeadLetter, withPayload bool) wire.DeadLetterInfo {
	m := dl.GetMessage()
	if m == nil {
		m = &delaystore.StoredMessage{}
	}
	mi := messageInfo(k, m, withPayload)
	mi.Attempt = dl.Attempts
	return wire.DeadLetterInfo{MessageInfo: mi, Reason: dl.Reason, Attempts: dl.Attempts, LastAnswer: dl.LastAnswer, DiedAt: formatTime(dl.DiedAtNs)}
}

// apiDeadGet returns one dead letter by the tag its message had.
func (s *Service) apiDeadGet(req micro.Request) (any, error) {
	var ref wire.MessageRef
	if err := decodeRequest(req.Data(), &ref); err != nil {
		return nil, err
	}
	return s.DeadLetter(ref)
}

// DeadLetter is DEAD.GET: the dead letter whose message had the tag ref
// names, with its payload if ref asks for it.
func (s *Service) DeadLetter(ref wire.MessageRef) (wire.DeadLetterInfo, error) {
	if err := s.answering(); err != nil {
		return wire.DeadLetterInfo{}, err
	}
	if ref.Tag == "" || ref.Subject != "" || ref.ID != "" {
		return wire.DeadLetterInfo{}, badRequest(`give "tag": dead letters are found by the tag their message had`)
	}
	k, err := keys.ParseTag(ref.Tag)
	if err != nil {
		return wire.DeadLetterInfo{}, badTag("tag", err)
	}
	dl, err := s.core.Load().GetDead(k)
	if err != nil {
		return wire.DeadLetterInfo{}, err
	}
	return deadLetterInfo(k, dl, ref.Payload), nil
}

func (s *Service) apiDeadList(req micro.Request) (any, error) {
	var r wire.DeadListRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.DeadLetters(r)
}

// DeadLetters is DEAD.LIST: the dead letters that match a filter, in key
// order (subject hash, then fire time), paged by the tag of the last one
// read.
func (s *Service) DeadLetters(r wire.DeadListRequest) (wire.DeadListReply, error) {
	if err := s.answering(); err != nil {
		return wire.DeadListReply{}, err
	}
	f, err := compileFilter(r.Filter)
	if err != nil {
		return wire.DeadListReply{}, err
	}
	if r.State != "" && f.state != stateDead {
		return wire.DeadListReply{}, badRequest(`"state" %q: DEAD.LIST lists dead letters; leave it out or give "dead"`, r.State)
	}
	limit, err := pageLimit(r.Limit)
	if err != nil {
		return wire.DeadListReply{}, err
	}
	var after *keys.Key
	if r.After != "" {
		k, err := keys.ParseTag(r.After)
		if err != nil {
			return wire.DeadListReply{}, badTag(`"after"`, err)
		}
		after = &k
	}
	out := wire.DeadListReply{DeadLetters: []wire.DeadLetterInfo{}}
	envelope, _ := json.Marshal(wire.DeadListReply{DeadLetters: []wire.DeadLetterInfo{}, Next: keys.Key{}.Tag()})
	budget := int(s.nc.MaxPayload()) - len(envelope)
	size, scanned := 0, 0
	var last keys.Key
	more := false
	err = s.core.Load().ScanDead(keys.TopicHash(f.subject), f.literal, after, func(k keys.Key, dl *delaystore.DeadLetter) bool {
		if len(out.DeadLetters) == limit || scanned == maxScanned {
			more = true
			return false
		}
		scanned++
		m := dl.GetMessage()
		if m == nil || !f.match(m, dl.Attempts) || f.tag != nil && k != *f.tag {
			last = k
			return true
		}
		info := deadLetterInfo(k, dl, false)
		b, _ := json.Marshal(info)
		if size += len(b) + 1; size > budget && len(out.DeadLetters) > 0 {
			more = true
			return false
		}
		out.DeadLetters = append(out.DeadLetters, info)
		last = k
		return true
	})
	if err != nil {
		return wire.DeadListReply{}, err
	}
	if more {
		out.Next = last.Tag()
	}
	return out, nil
}
