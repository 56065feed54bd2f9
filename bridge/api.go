package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/dispatch/recur"
	"github.com/natsdelay/natsdelay/keys"
)

// Version is the service version reported by INFO and the micro service
// discovery. It is a semantic version, as micro requires.
var Version = "0.1.0"

const (
	defaultListLimit = 100
	maxListLimit     = 1000
	apiTimeout       = 10 * time.Second
)

// register adds the micro service with the ingest endpoint and the API.
func (s *Service) register() error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        wire.ServiceName,
		Version:     Version,
		Description: "Durable delayed delivery for core NATS",
		QueueGroup:  s.queueGroup(),
		Metadata:    map[string]string{"engine": s.cfg.Engine},
	})
	if err != nil {
		return fmt.Errorf("bridge: register micro service: %w", err)
	}
	s.svc = svc
	if err := svc.AddEndpoint("ingest", micro.HandlerFunc(s.handleIngest),
		micro.WithEndpointSubject(s.cfg.IngestPrefix+".>"),
		micro.WithEndpointPendingLimits(1<<20, 512<<20)); err != nil {
		return fmt.Errorf("bridge: add ingest endpoint: %w", err)
	}
	if err := svc.AddEndpoint("js_schedule", micro.HandlerFunc(s.handleJSSchedule),
		micro.WithEndpointSubject(s.cfg.JSSchedulePrefix+".>")); err != nil {
		return fmt.Errorf("bridge: add JetStream schedule endpoint: %w", err)
	}
	for _, ep := range s.apiEndpoints() {
		// Endpoint names are not subjects. They are the verbs in lower
		// case, as the ingest endpoint's name is; the subjects keep the
		// verbs in capitals, as the protocol has them.
		name := strings.ToLower(strings.ReplaceAll(ep.verb, ".", "_"))
		err := svc.AddEndpoint(name, s.apiHandler(ep), micro.WithEndpointSubject(s.cfg.APIPrefix+"."+ep.verb))
		if err != nil {
			return fmt.Errorf("bridge: add %s endpoint: %w", ep.verb, err)
		}
	}
	// BACKUP answers with a stream, not one reply: see handleBackup.
	err = svc.AddEndpoint("backup", micro.HandlerFunc(s.handleBackup), micro.WithEndpointSubject(s.cfg.APIPrefix+"."+wire.VerbBackup))
	if err != nil {
		return fmt.Errorf("bridge: add %s endpoint: %w", wire.VerbBackup, err)
	}
	return nil
}

// apiEndpoint is one verb of the API and its handler.
type apiEndpoint struct {
	verb string
	h    func(micro.Request) (any, error)
	// tooLarge says how to ask for a smaller reply.
	tooLarge string
}

// apiEndpoints are the API's verbs: the bulk verbs, and the cluster's
// when the service runs on one, with the others.
func (s *Service) apiEndpoints() []apiEndpoint {
	eps := []apiEndpoint{
		{wire.VerbInfo, s.apiInfo, ""},
		{wire.VerbGet, s.apiGet, `; ask without "payload"`},
		{wire.VerbList, s.apiList, ""},
		{wire.VerbCancel, s.apiCancel, ""},
		{wire.VerbSubjects, s.apiSubjects, ""},
		{wire.VerbSchedules, s.apiSchedules, ""},
		{wire.VerbReschedule, s.apiReschedule, ""},
		{wire.VerbFire, s.apiFire, ""},
		{wire.VerbDeadList, s.apiDeadList, ""},
		{wire.VerbDeadGet, s.apiDeadGet, `; ask without "payload"`},
		{wire.VerbLimitsSet, s.apiLimitsSet, ""},
		{wire.VerbLimitsGet, s.apiLimitsGet, ""},
		{wire.VerbLimitsList, s.apiLimitsList, ""},
		{wire.VerbLimitsDelete, s.apiLimitsDelete, ""},
		{wire.VerbPause, s.apiPause, ""},
		{wire.VerbResume, s.apiResume, ""},
	}
	eps = append(eps, s.scheduleEndpoints()...)
	for _, verb := range wire.BulkVerbs {
		eps = append(eps, apiEndpoint{wire.VerbBulk + "." + verb, s.apiBulk(verb), ""})
	}
	if s.cluster != nil {
		eps = append(eps, apiEndpoint{wire.VerbClusterAdd, s.apiClusterAdd, ""}, apiEndpoint{wire.VerbClusterRemove, s.apiClusterRemove, ""})
	}
	return eps
}

// apiHandler answers ep's requests with its handler's reply as JSON, or
// its error.
func (s *Service) apiHandler(ep apiEndpoint) micro.Handler {
	h, tooLarge := ep.h, ep.tooLarge
	return micro.HandlerFunc(func(req micro.Request) {
		if err := s.answering(); err != nil {
			respondError(req, err)
			return
		}
		v, err := h(req)
		if err != nil {
			respondError(req, err)
			return
		}
		body, err := marshalReply(v)
		if err != nil {
			respondError(req, err)
			return
		}
		// NB: nats.go refuses a reply over max_payload, and the
		// requester would wait for nothing until its timeout.
		if limit := int(s.nc.MaxPayload()); len(body) > limit {
			respondError(req, badRequest("the reply would be %d bytes, %d over the server's max_payload of %d%s",
				len(body), len(body)-limit, limit, tooLarge))
			return
		}
		_ = req.Respond(body)
	})
}

// marshalReply encodes an API reply as JSON. Unlike json.Marshal it
// leaves <, > and & as they are, so a filter such as orders.> reads as
// written rather than as orders.\u003e.
func marshalReply(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("bridge: encode the reply: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decodeRequest reads a JSON request body strictly: unknown fields and
// trailing data are errors. An empty body is the zero request.
func decodeRequest(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("request body: %v", err)
	}
	if dec.More() {
		return badRequest("request body: data after the JSON object")
	}
	return nil
}

func (s *Service) apiInfo(req micro.Request) (any, error) {
	var empty struct{}
	if err := decodeRequest(req.Data(), &empty); err != nil {
		return nil, err
	}
	return s.Info()
}

// Info is INFO's answer: the service's version, storage, counts, stats,
// settings and, in a cluster, its members.
func (s *Service) Info() (wire.InfoReply, error) {
	if err := s.answering(); err != nil {
		return wire.InfoReply{}, err
	}
	c := s.core.Load()
	storage := "ok"
	var counts wire.Counts
	if cause := c.Down(); cause != nil {
		storage = fmt.Sprintf("failing: %v", cause)
	} else {
		var err error
		if counts, err = c.Counts(); err != nil {
			return wire.InfoReply{}, err
		}
	}
	backoff := make([]string, len(s.cfg.Delivery.Backoff))
	for i, b := range s.cfg.Delivery.Backoff {
		backoff[i] = b.String()
	}
	var cluster *wire.ClusterInfo
	if s.cluster != nil {
		cluster = s.clusterInfo()
	}
	// NB: wire.Stats converts from dispatch.Stats only while the two have
	// the same fields; TestInfoStats_SameJSONAsDispatch checks their names
	// on the wire.
	return wire.InfoReply{
		Cluster:         cluster,
		Version:         Version,
		Engine:          s.cfg.Engine,
		Storage:         storage,
		Counts:          counts,
		Stats:           wire.Stats(c.Stats()),
		LimitedSubjects: c.LimitedSubjects(wire.MaxLimitedShown),
		Ingest:          wire.IngestStats{ThrottleFolded: s.m.totals.folded.Load()},
		Config: wire.ConfigSummary{
			IngestPrefix: s.cfg.IngestPrefix, AckPrefix: s.cfg.AckPrefix, APIPrefix: s.cfg.APIPrefix,
			AckWait: c.Config().Delivery.AckWait.String(), MaxDeliver: s.cfg.Delivery.MaxDeliver, Backoff: backoff,
			DeadLetterSubject: s.cfg.Delivery.DeadLetterSubject, DeadLetterExpired: s.cfg.Delivery.DeadLetterExpired,
			TimeBucket: s.cfg.Repository.TimeBucket.String(), MaxPayload: s.cfg.MaxPayload, MaxControlLine: s.cfg.MaxControlLine,
			DeadRetention: deadRetention(c.Config().Expiry.DeadRetention),
		},
	}, nil
}

// badTag is the 400 for err, keys.ParseTag's, about the tag given as
// field: what is wrong with it, in the words of the request.
func badTag(field string, err error) error {
	return badRequest("%s %s", field, strings.TrimPrefix(err.Error(), keys.ErrTag.Error()+": "))
}

func (s *Service) resolve(ref wire.MessageRef) (keys.Key, error) {
	switch {
	case ref.Tag != "" && (ref.Subject != "" || ref.ID != ""):
		return keys.Key{}, badRequest(`give either "tag" or "subject" and "id", not both`)
	case ref.Tag != "":
		k, err := keys.ParseTag(ref.Tag)
		if err != nil {
			return k, badTag("tag", err)
		}
		return k, s.frozenKey(k)
	case ref.Subject == "" || ref.ID == "":
		return keys.Key{}, badRequest(`give "tag", or "subject" and "id"`)
	}
	if err := checkTarget(ref.Subject, nil); err != nil {
		return keys.Key{}, err
	}
	k, err := s.core.Load().Lookup(ref.Subject, ref.ID)
	if err == nil {
		err = s.frozenKey(k)
	}
	return k, err
}

func messageInfo(k keys.Key, m *delaystore.StoredMessage, withPayload bool) wire.MessageInfo {
	return messageInfoUpcoming(k, m, withPayload, wire.DefaultUpcoming)
}

// messageInfoUpcoming is messageInfo with up to upcoming next times of a
// schedule.
func messageInfoUpcoming(k keys.Key, m *delaystore.StoredMessage, withPayload bool, upcoming int) wire.MessageInfo {
	mi := wire.MessageInfo{
		Tag: k.Tag(), Subject: m.Subject, ID: m.ClientId,
		FireAt: formatTime(m.FireAtNs), EnqueuedAt: formatTime(m.EnqueuedAtNs),
		Attempt: m.Attempt, Ack: "explicit", MaxDeliver: m.MaxDeliver, Size: len(m.Payload),
	}
	if m.ExpireAtNs != 0 {
		mi.ExpireAt = formatTime(m.ExpireAtNs)
	}
	if m.AckPolicy == delaystore.AckPolicy_ACK_NONE {
		mi.Ack = "none"
	}
	if m.DebounceFirstNs != 0 {
		mi.DebounceFirst = formatTime(m.DebounceFirstNs)
	}
	if m.DebounceMaxNs != 0 {
		mi.DebounceMax = time.Duration(m.DebounceMaxNs).String()
	}
	if m.ThrottleNs != 0 {
		mi.Throttle = time.Duration(m.ThrottleNs).String()
	}
	if r := m.GetRecurrence(); r != nil {
		if mi.ID == "" {
			mi.ID = r.Id
		}
		mi.Schedule = scheduleInfo(r, upcoming)
	}
	if len(m.Headers) > 0 {
		mi.Headers = make(map[string][]string, len(m.Headers))
		for _, h := range m.Headers {
			mi.Headers[h.Name] = h.Values
		}
	}
	if withPayload {
		mi.Payload = m.Payload
		if mi.Payload == nil {
			mi.Payload = []byte{}
		}
	}
	return mi
}

// upcomingOf checks the "upcoming" of a request: 0 means the default.
func upcomingOf(n int) (int, error) {
	switch {
	case n == 0:
		return wire.DefaultUpcoming, nil
	case n < 0 || n > wire.MaxUpcoming:
		return 0, badRequest(`"upcoming" %d: want 1 to %d next times`, n, wire.MaxUpcoming)
	}
	return n, nil
}

// scheduleInfo describes the schedule of an occurrence, with up to n of
// its next times.
func scheduleInfo(r *delaystore.Recurrence, n int) *wire.ScheduleInfo {
	si := &wire.ScheduleInfo{
		Name: r.Name, Spec: scheduleSpec(r), Zone: r.Zone, Limit: r.Limit,
		CatchUp:    catchUpName(r.CatchUp),
		Occurrence: formatTime(r.OccurrenceNs), Seq: r.Seq, Fired: r.Seq - 1, Skipped: r.Skipped,
		Next: []string{},
	}
	if si.Zone == "" {
		si.Zone = "UTC"
	}
	if r.Overlap != delaystore.Overlap_OVERLAP_ALLOW {
		si.Overlap = overlapName(r.Overlap)
	}
	if r.UntilNs != 0 {
		si.Until = formatTime(r.UntilNs)
	}
	si.Skip, si.Exclude, si.JSScheduler = r.Skip, r.Exclude, r.JsScheduler
	if r.JitterNs != 0 {
		si.Jitter = time.Duration(r.JitterNs).String()
	}
	p, err := recur.Of(r)
	if err != nil || r.Paused {
		si.Paused = r.Paused
		return si
	}
	var next []time.Time
	switch {
	case !r.Planned:
		next = p.Preview(time.Unix(0, r.OccurrenceNs), r.Seq, r.Skip, n)
	case r.NextNs != 0:
		// Out for delivery: its successor, which holds any skips
		// asked for since, is the schedule's newest occurrence.
		si.Fired = r.Seq
		next = p.Preview(time.Unix(0, r.NextNs), r.Seq+1, 0, n)
	default:
		si.Fired = r.Seq
	}
	for _, t := range next {
		si.Next = append(si.Next, formatTime(t.UnixNano()))
	}
	return si
}

// apiSchedules lists recurring schedules from the schedule index, each as
// its next occurrence, paged. The cursor is "<subject> <name>": subjects
// hold no spaces.
func (s *Service) apiSchedules(req micro.Request) (any, error) {
	var r wire.SchedulesRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.Schedules(r)
}

// Schedules is SCHEDULES' answer to r: a page of recurring schedules, each
// as its next occurrence.
func (s *Service) Schedules(r wire.SchedulesRequest) (wire.SchedulesReply, error) {
	if err := s.answering(); err != nil {
		return wire.SchedulesReply{}, err
	}
	if r.Subject != "" {
		if err := checkTarget(r.Subject, nil); err != nil {
			return wire.SchedulesReply{}, err
		}
	}
	limit, err := pageLimit(r.Limit)
	if err != nil {
		return wire.SchedulesReply{}, err
	}
	upcoming, err := upcomingOf(r.Upcoming)
	if err != nil {
		return wire.SchedulesReply{}, err
	}
	var afterSubject, afterName string
	if r.After != "" {
		var ok bool
		if afterSubject, afterName, ok = strings.Cut(r.After, " "); !ok || afterSubject == "" {
			return wire.SchedulesReply{}, badRequest(`"after" %q: want the "next" of the previous page, "<subject> <name>"`, keys.Clip(r.After))
		}
	}
	c := s.core.Load()
	// One more than a page tells whether there is a next one.
	refs, err := c.ScheduleRefs(r.Subject, afterSubject, afterName, limit+1)
	if err != nil {
		return wire.SchedulesReply{}, err
	}
	out := wire.SchedulesReply{Subject: r.Subject, Schedules: []wire.MessageInfo{}}
	budget := int(s.nc.MaxPayload()) - 1024
	size := 0
	for i, ref := range refs {
		if i == limit {
			out.Next = refs[i-1].Subject + " " + refs[i-1].Name
			break
		}
		m, err := c.Get(ref.Key)
		if err != nil {
			// Settled since the index was read: the schedule ended.
			continue
		}
		mi := messageInfoUpcoming(ref.Key, m, false, upcoming)
		b, _ := json.Marshal(mi)
		if size += len(b) + 1; size > budget && len(out.Schedules) > 0 {
			out.Next = refs[i-1].Subject + " " + refs[i-1].Name
			break
		}
		out.Schedules = append(out.Schedules, mi)
	}
	return out, nil
}

func (s *Service) apiGet(req micro.Request) (any, error) {
	var r wire.GetRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.GetUpcoming(r)
}

// Get is GET's answer: the pending message ref names, with its payload if
// ref asks for it.
func (s *Service) Get(ref wire.MessageRef) (wire.MessageInfo, error) {
	return s.GetUpcoming(wire.GetRequest{MessageRef: ref})
}

// GetUpcoming is GET's answer to r: as Get, with r.Upcoming next times of
// a schedule.
func (s *Service) GetUpcoming(r wire.GetRequest) (wire.MessageInfo, error) {
	if err := s.answering(); err != nil {
		return wire.MessageInfo{}, err
	}
	n, err := upcomingOf(r.Upcoming)
	if err != nil {
		return wire.MessageInfo{}, err
	}
	k, err := s.resolve(r.MessageRef)
	if err != nil {
		return wire.MessageInfo{}, err
	}
	m, err := s.core.Load().Get(k)
	if err != nil {
		return wire.MessageInfo{}, err
	}
	return messageInfoUpcoming(k, m, r.Payload, n), nil
}

func (s *Service) apiList(req micro.Request) (any, error) {
	var r wire.ListRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.List(r)
}

// List is LIST's answer to r: a page of a subject's pending messages in
// fire order.
func (s *Service) List(r wire.ListRequest) (wire.ListReply, error) {
	if err := s.answering(); err != nil {
		return wire.ListReply{}, err
	}
	if r.Subject == "" {
		return wire.ListReply{}, badRequest(`"subject" is required`)
	}
	if err := checkTarget(r.Subject, nil); err != nil {
		return wire.ListReply{}, err
	}
	limit, err := pageLimit(r.Limit)
	if err != nil {
		return wire.ListReply{}, err
	}
	hash := keys.TopicHash(r.Subject)
	var from []byte
	if r.After != "" {
		k, err := keys.ParseTag(r.After)
		if err != nil {
			return wire.ListReply{}, badTag(`"after"`, err)
		}
		if k.TopicHash() != hash {
			return wire.ListReply{}, badRequest(`"after" %s is not a tag of subject %q`, k, keys.Clip(r.Subject))
		}
		from = k.Successor()
	}
	out := wire.ListReply{Subject: r.Subject, Messages: []wire.MessageInfo{}}
	more := false
	// NB: a page holds fewer than limit messages when more would not fit
	// the server's max_payload: the reply could not be sent, and the
	// headers of a thousand messages could take a gigabyte to build.
	envelope, _ := json.Marshal(wire.ListReply{Subject: r.Subject, Messages: []wire.MessageInfo{}, Next: keys.Key{}.Tag()})
	budget := int(s.nc.MaxPayload()) - len(envelope)
	size := 0
	err = s.core.Load().List(r.Subject, from, func(k keys.Key, m *delaystore.StoredMessage) bool {
		if len(out.Messages) == limit {
			more = true
			return false
		}
		mi := messageInfo(k, m, false)
		b, _ := json.Marshal(mi)
		if size += len(b) + 1; size > budget && len(out.Messages) > 0 {
			more = true
			return false
		}
		out.Messages = append(out.Messages, mi)
		return true
	})
	if err != nil {
		return wire.ListReply{}, err
	}
	if more {
		out.Next = out.Messages[len(out.Messages)-1].Tag
	}
	return out, nil
}

func (s *Service) apiCancel(req micro.Request) (any, error) {
	var ref wire.MessageRef
	if err := decodeRequest(req.Data(), &ref); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if err := s.CancelRef(ctx, ref); err != nil {
		return nil, err
	}
	return wire.CancelReply{Canceled: true}, nil
}

// CancelRef is CANCEL: it cancels the pending message ref names, or the
// whole schedule of an occurrence. A message that is not pending is a
// wire.ErrNotFound.
func (s *Service) CancelRef(ctx context.Context, ref wire.MessageRef) error {
	if err := s.answering(); err != nil {
		return err
	}
	if ref.Payload {
		return badRequest(`"payload" is not a CANCEL field`)
	}
	k, err := s.resolve(ref)
	if err != nil {
		return err
	}
	return s.core.Load().Cancel(ctx, k)
}

// apiSubjects lists the subjects with pending messages or dead letters
// that match a filter, in subject order, paged. It reads the subject
// registry and the registry of dead letters per subject from the store
// and, for due_now, the keys of due messages only: no message is read or
// decoded.
func (s *Service) apiSubjects(req micro.Request) (any, error) {
	var r wire.SubjectsRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		return nil, err
	}
	return s.Subjects(r)
}

// Subjects is SUBJECTS' answer to r: a page of the subjects with pending
// messages that match its filter.
func (s *Service) Subjects(r wire.SubjectsRequest) (wire.SubjectsReply, error) {
	if err := s.answering(); err != nil {
		return wire.SubjectsReply{}, err
	}
	if r.Filter == "" {
		r.Filter = ">"
	}
	if err := checkFilter(r.Filter); err != nil {
		return wire.SubjectsReply{}, err
	}
	limit, err := pageLimit(r.Limit)
	if err != nil {
		return wire.SubjectsReply{}, err
	}
	c := s.core.Load()
	page, more, err := subjectsPage(c, r.Filter, r.After, limit)
	if err != nil {
		return wire.SubjectsReply{}, err
	}
	paused, err := pauses(c)
	if err != nil {
		return wire.SubjectsReply{}, err
	}
	out := wire.SubjectsReply{Filter: r.Filter, Subjects: []wire.SubjectInfo{}}
	for _, t := range page {
		var due uint64
		if t.pending > 0 {
			if due, err = c.DueNow(t.subject); err != nil {
				return wire.SubjectsReply{}, err
			}
		}
		st := c.SubjectState(t.subject)
		out.Subjects = append(out.Subjects, wire.SubjectInfo{Subject: t.subject, Pending: t.pending, DueNow: due, InFlight: st.InFlight, Limited: st.Limited, Dead: t.dead,
			PausedBy: paused.of(t.subject)})
	}
	if more {
		out.Next = out.Subjects[len(out.Subjects)-1].Subject
	}
	return out, nil
}

// subjectEntry is a subject of a SUBJECTS page, with its counts.
type subjectEntry struct {
	subject       string
	pending, dead uint64
}

// subjectRegistries are the registries of subjects with pending
// messages and with dead letters, in subject order: the core's.
type subjectRegistries interface {
	ScanTopics(from string, yield func(delaystore.Topic) bool) error
	ScanDeadTopics(from string, yield func(delaystore.DeadTopic) bool) error
}

// subjectsPage reads a page of up to limit subjects after "after" that
// match filter, from the registries of pending messages and of dead
// letters, in subject order; more says whether more follow.
func subjectsPage(c subjectRegistries, filter, after string, limit int) (page []*subjectEntry, more bool, err error) {
	// The registry is in subject order: the page starts after "after",
	// which need not be pending any more, and no earlier than the
	// filter's literal start, and ends where subjects stop having it, so
	// a filter such as orders.> reads the orders and not every subject.
	prefix := literalPrefix(filter)
	from := prefix
	if after != "" && after+"\x00" > from {
		from = after + "\x00" // subjects hold no NUL: the next one after
	}
	// A subject with dead letters and nothing pending is listed too: the
	// page merges the two registries, each read up to a page.
	byName := map[string]*subjectEntry{}
	scanned := func(subject string) bool { return strings.HasPrefix(subject, prefix) }
	n := 0
	err = c.ScanTopics(from, func(t delaystore.Topic) bool {
		if !scanned(t.Subject) || n > limit {
			return false
		}
		if dispatch.SubjectMatches(filter, t.Subject) {
			byName[t.Subject] = &subjectEntry{subject: t.Subject, pending: t.Pending}
			n++
		}
		return true
	})
	if err != nil {
		return nil, false, err
	}
	n = 0
	err = c.ScanDeadTopics(from, func(t delaystore.DeadTopic) bool {
		if !scanned(t.Subject) || n > limit {
			return false
		}
		if dispatch.SubjectMatches(filter, t.Subject) {
			e := byName[t.Subject]
			if e == nil {
				e = &subjectEntry{subject: t.Subject}
				byName[t.Subject] = e
			}
			e.dead = t.Dead
			n++
		}
		return true
	})
	if err != nil {
		return nil, false, err
	}
	page = make([]*subjectEntry, 0, len(byName))
	for _, e := range byName {
		page = append(page, e)
	}
	slices.SortFunc(page, func(a, b *subjectEntry) int { return strings.Compare(a.subject, b.subject) })
	more = len(page) > limit
	return page[:min(len(page), limit)], more, nil
}

// pageLimit is the page size a request asks for: the default when it
// gives none, else 1 to maxListLimit.
func pageLimit(limit *int) (int, error) {
	if limit == nil {
		return defaultListLimit, nil
	}
	if *limit < 1 || *limit > maxListLimit {
		return 0, badRequest(`"limit" %d: want 1 to %d`, *limit, maxListLimit)
	}
	return *limit, nil
}

// checkFilter accepts a NATS subject filter: non-empty tokens, each a
// literal, * for any one token, or > for one or more at the end.
func checkFilter(f string) error {
	if !utf8.ValidString(f) {
		return badRequest(`"filter" %q is not valid UTF-8`, keys.Clip(f))
	}
	if strings.ContainsFunc(f, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return badRequest(`"filter" %q contains white space or a control character`, keys.Clip(f))
	}
	toks := strings.Split(f, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			return badRequest(`"filter" %q has an empty token: want a subject filter such as orders.* or orders.>`, keys.Clip(f))
		case tok == ">" && i != len(toks)-1:
			return badRequest(`"filter" %q: > must be the last token`, keys.Clip(f))
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return badRequest(`"filter" %q: a wildcard must be a whole token, * or >`, keys.Clip(f))
		}
	}
	return nil
}

// literalPrefix is the start of filter before its first wildcard token:
// every subject the filter matches starts with it.
func literalPrefix(filter string) string {
	end := 0
	for end < len(filter) {
		tok, _, more := strings.Cut(filter[end:], ".")
		if tok == "*" || tok == ">" {
			break
		}
		end += len(tok)
		if !more {
			break
		}
		end++ // the dot
	}
	return filter[:end]
}
