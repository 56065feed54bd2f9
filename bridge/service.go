package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"natsdelay/delaystore"
	"natsdelay/dispatch"
	"natsdelay/keys"
)

// Config configures a Service. A zero field means the default shown by
// DefaultConfig.
type Config struct {
	// Conn is the NATS connection. Required. The Service does not close it.
	// It must not be created with nats.NoEcho: the service hears its own
	// flush markers and the server's no-responders answers on it.
	Conn *nats.Conn
	// Store is where messages are kept. Required. The Service owns it from
	// New on: Close closes it, also when New fails.
	Store delaystore.Store
	// Reopen, if not nil, opens the store again, with the same settings,
	// after a write to disk failed it (delaystore.ErrFailed). The Service
	// closes the failed store first, then calls Reopen with backoff until
	// it succeeds, and owns each store it returns. Nil leaves the Service
	// unavailable after such a failure until it is closed.
	Reopen func() (delaystore.Store, error)
	// ReopenBackoff is the wait after the first failed Reopen; it doubles
	// up to ReopenMaxBackoff. Defaults 100ms and 5s.
	ReopenBackoff    time.Duration
	ReopenMaxBackoff time.Duration
	// Engine names the store's engine, for INFO.
	Engine string

	// IngestPrefix is the prefix publishers send to. Default "delay".
	IngestPrefix string
	// AckPrefix is the prefix of delivery reply subjects. Default "$DELAY.ACK".
	AckPrefix string
	// APIPrefix is the prefix of the API. Default "$DELAY.API".
	APIPrefix string
	// QueueGroup is the queue group of the ingest subscription. Default
	// "natsdelay".
	QueueGroup string
	// MaxPayload bounds the payload of a scheduled message. Default: the
	// server's max_payload. Whatever it is, ingest also refuses a message
	// whose delivery or dead letter, with the headers the service adds,
	// would exceed the server's max_payload.
	MaxPayload int
	// MaxControlLine is the server's max_control_line: the longest protocol
	// line (subject, reply subject, sizes) the server takes from a client
	// before it closes the connection. The server does not announce it, so
	// set it when the server's max_control_line is not the default. Ingest
	// refuses messages whose delivery would exceed it. Default 4096, the
	// server's default.
	MaxControlLine int
	// TimeBucket is the width of the time bucket in keys; 0 (default) is raw
	// milliseconds. It must not change for an existing data dir.
	TimeBucket time.Duration
	// MaxBatch bounds the messages of one group commit. Default 4096.
	MaxBatch int
	// MaxBatchBytes bounds the bytes of one group commit (payloads,
	// subjects, headers), and twice it the bytes waiting to be committed.
	// Default 64 MiB.
	MaxBatchBytes int

	// AckWait, MaxDeliver, Backoff, DeadLetterSubject and DeadLetterExpired
	// are the dispatch settings (see dispatch.Config). AckWait default 30s.
	AckWait           time.Duration
	MaxDeliver        uint32
	Backoff           []time.Duration
	DeadLetterSubject string
	DeadLetterExpired bool
	// ExpiryInterval is how often expired messages are removed. Default 1s.
	ExpiryInterval time.Duration
	// MaxInFlight bounds the deliveries waiting for an answer; memory grows
	// with it. 0 means the dispatcher's default (dispatch.DefaultConfig).
	MaxInFlight int

	// Registerer receives the service's Prometheus metrics; nil keeps them
	// unregistered.
	Registerer prometheus.Registerer

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		IngestPrefix:     DefaultIngestPrefix,
		AckPrefix:        DefaultAckPrefix,
		APIPrefix:        DefaultAPIPrefix,
		QueueGroup:       "natsdelay",
		MaxBatch:         4096,
		MaxBatchBytes:    64 << 20,
		MaxControlLine:   DefaultMaxControlLine,
		AckWait:          30 * time.Second,
		ExpiryInterval:   time.Second,
		ReopenBackoff:    100 * time.Millisecond,
		ReopenMaxBackoff: 5 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.IngestPrefix, d.IngestPrefix)
	def(&c.AckPrefix, d.AckPrefix)
	def(&c.APIPrefix, d.APIPrefix)
	def(&c.QueueGroup, d.QueueGroup)
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = d.MaxBatchBytes
	}
	if c.MaxControlLine == 0 {
		c.MaxControlLine = d.MaxControlLine
	}
	if c.AckWait == 0 {
		c.AckWait = d.AckWait
	}
	if c.ExpiryInterval == 0 {
		c.ExpiryInterval = d.ExpiryInterval
	}
	if c.ReopenBackoff == 0 {
		c.ReopenBackoff = d.ReopenBackoff
		if c.ReopenMaxBackoff > 0 {
			c.ReopenBackoff = min(c.ReopenBackoff, c.ReopenMaxBackoff)
		}
	}
	if c.ReopenMaxBackoff == 0 {
		c.ReopenMaxBackoff = max(d.ReopenMaxBackoff, c.ReopenBackoff)
	}
	if c.MaxPayload == 0 && c.Conn != nil {
		c.MaxPayload = int(c.Conn.MaxPayload())
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Backoff = append([]time.Duration(nil), c.Backoff...)
	return c
}

// Validate reports every bad field at once.
func (c Config) Validate() error {
	var errs []error
	if c.Conn == nil {
		errs = append(errs, fmt.Errorf("%w: Conn is required", ErrInvalidConfig))
	}
	if c.Store == nil {
		errs = append(errs, fmt.Errorf("%w: Store is required", ErrInvalidConfig))
	}
	return errors.Join(append(errs, c.ValidateSettings())...)
}

// ValidateSettings reports every bad setting at once, without requiring
// Conn and Store, so a program can check its configuration before it
// connects or opens anything.
func (c Config) ValidateSettings() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, p := range []struct{ name, v string }{{"IngestPrefix", c.IngestPrefix}, {"AckPrefix", c.AckPrefix}, {"APIPrefix", c.APIPrefix}} {
		if p.v == "" {
			continue
		}
		if err := checkTarget(p.v, nil); err != nil {
			bad("%s (%q) must be a concrete subject without wildcards", p.name, p.v)
		}
	}
	if c.DeadLetterSubject != "" {
		if err := checkTarget(c.DeadLetterSubject, nil); err != nil {
			bad("DeadLetterSubject (%q) must be a concrete subject without wildcards", c.DeadLetterSubject)
		}
	}
	if c.MaxPayload < 0 {
		bad("MaxPayload (%d) must be > 0", c.MaxPayload)
	}
	if c.MaxControlLine < 0 {
		bad("MaxControlLine (%d) must be > 0", c.MaxControlLine)
	}
	if c.MaxBatch < 0 {
		bad("MaxBatch (%d) must be > 0", c.MaxBatch)
	}
	if c.MaxBatchBytes < 0 {
		bad("MaxBatchBytes (%d) must be > 0", c.MaxBatchBytes)
	}
	if c.TimeBucket < 0 || c.TimeBucket%time.Millisecond != 0 {
		bad("TimeBucket (%v) must be a whole number of milliseconds >= 0", c.TimeBucket)
	}
	if c.AckWait < 0 {
		bad("AckWait (%v) must be > 0", c.AckWait)
	}
	if c.MaxInFlight < 0 {
		bad("MaxInFlight (%d) must be > 0", c.MaxInFlight)
	}
	if c.ExpiryInterval < 0 {
		bad("ExpiryInterval (%v) must be > 0", c.ExpiryInterval)
	}
	for i, b := range c.Backoff {
		if b < 0 {
			bad("Backoff[%d] (%v) must be >= 0", i, b)
		}
	}
	if c.ReopenBackoff < 0 || c.ReopenMaxBackoff < 0 {
		bad("ReopenBackoff (%v) and ReopenMaxBackoff (%v) must be > 0", c.ReopenBackoff, c.ReopenMaxBackoff)
	}
	if c.ReopenMaxBackoff > 0 && c.ReopenBackoff > c.ReopenMaxBackoff {
		bad("ReopenBackoff (%v) must not exceed ReopenMaxBackoff (%v)", c.ReopenBackoff, c.ReopenMaxBackoff)
	}
	return errors.Join(errs...)
}

// Service is a running natsdelay: it takes messages on the ingest prefix,
// stores them, delivers them when due and applies ACKs. It owns the store,
// the dispatcher and the janitor. It is safe for concurrent use.
//
// # Storage faults
//
// When a write to disk fails (delaystore.ErrFailed: a failed WAL write or
// fsync, a full disk), the Service recovers by itself, without a restart:
// ingest, ack syncs and the API answer 503 "storage failing: <cause>;
// recovering" at once, Ready reports unavailable, and delivery stops. A
// goroutine owned by the Service closes the failed store and opens it again
// through Config.Reopen, with backoff, until that works, then starts a new
// repository, dispatcher, janitor and writer on it. Deliveries that were in
// flight are delivered again (at least once).
type Service struct {
	cfg Config
	log *slog.Logger
	nc  *nats.Conn
	pub *publisher
	lim scheduleLimits
	m   *metrics

	// gen is the current generation: the store and what runs on it. It is
	// replaced whole by recovery; see generation.
	gen atomic.Pointer[generation]
	// fault is non-nil while the store has failed and is not yet reopened.
	fault atomic.Pointer[fault]
	// stateMu orders setting fault against swapping in a generation, so a
	// new generation that fails at once keeps the Service recovering.
	stateMu sync.Mutex
	// kept holds the counters of dispatchers of retired generations, so
	// the metrics and INFO count from the start of the process. keptMu
	// also orders swapping gen against reading it with kept. Lock order:
	// stateMu, then keptMu.
	keptMu sync.Mutex
	kept   dispatch.Stats

	svc     micro.Service
	ackSubs []*nats.Subscription

	// ingestMu orders handing messages to the writer against closing it:
	// handlers hold it shared, Close takes it to set closing, and recovery
	// takes it to wait for handlers that got in before the fault.
	ingestMu  sync.RWMutex
	closing   bool
	closeOnce sync.Once
	closeErr  error
	invalid   atomic.Uint64 // invalid plain publishes (no reply to tell)
	// invalidWarn and answerWarn limit the warnings about invalid plain
	// publishes and bad answers to deliveries.
	invalidWarn rateLimit
	answerWarn  rateLimit

	// kick wakes the recovery loop; cap 1: one pending wake-up is enough.
	kick chan struct{}
	// started is closed once New has stored the first generation.
	started chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

// New opens the repository over cfg.Store, starts the dispatcher and the
// janitor, and subscribes. On error everything started is stopped and the
// store is closed.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		if cfg.Store != nil {
			err = errors.Join(err, cfg.Store.Close())
		}
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Service{
		cfg: cfg, log: cfg.Logger.With("component", "bridge"), nc: cfg.Conn, m: newMetrics(),
		kick: make(chan struct{}, 1), started: make(chan struct{}), done: make(chan struct{}),
	}
	s.lim = scheduleLimits{
		maxPayload: cfg.MaxPayload, reserved: []string{cfg.IngestPrefix, cfg.AckPrefix, cfg.APIPrefix, "$SRV"},
		ackPrefix: cfg.AckPrefix, deadLetter: cfg.DeadLetterSubject, maxControlLine: cfg.MaxControlLine,
	}
	if err := s.start(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func (s *Service) start() error {
	s.pub = newPublisher(s.nc, s.cfg.AckPrefix, s.cfg.MaxControlLine)
	// NB: the ack subscriptions come first: deliveries rely on them for
	// no-responders answers and flush markers.
	//
	// What legitimately arrives on them is bounded by the in-flight window:
	// an answer or a no-responders notice per delivery, and a flush marker
	// per pass. They hold twice that; more is a flood (publishers of
	// garbage on the ack prefix), which nats.go then drops, reporting a
	// slow consumer, rather than let a backlog delay the answers and
	// markers queued behind it for minutes. A dropped answer or notice
	// only means a redelivery: at least once holds.
	window := s.cfg.MaxInFlight
	if window == 0 {
		window = dispatch.DefaultConfig().MaxInFlight
	}
	ackPending := 2*window + 1024
	for _, subj := range []string{s.cfg.AckPrefix + ".>", s.cfg.AckPrefix} {
		sub, err := s.nc.Subscribe(subj, s.handleAck)
		if err != nil {
			s.closeUnstarted()
			return fmt.Errorf("bridge: subscribe %s: %w", subj, err)
		}
		_ = sub.SetPendingLimits(ackPending, 64<<20)
		s.ackSubs = append(s.ackSubs, sub)
	}
	g, err := s.startGeneration(s.cfg.Store, false)
	if err != nil {
		return err
	}
	s.gen.Store(g)
	close(s.started)
	s.goFunc(s.recoverLoop)
	if s.cfg.Registerer != nil {
		if err := s.m.register(s.cfg.Registerer, s); err != nil {
			return fmt.Errorf("bridge: register metrics: %w", err)
		}
	}
	if err := s.register(); err != nil {
		return err
	}
	return s.nc.Flush()
}

// closeUnstarted closes cfg.Store when New fails before a generation owns
// it.
func (s *Service) closeUnstarted() {
	if err := s.cfg.Store.Close(); err != nil {
		s.log.Warn("closing the store", "err", err)
	}
}

// goFunc runs f in a goroutine that Close waits for.
func (s *Service) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Ready reports whether the service can take and deliver messages: it is
// not closing, its NATS connection is up, its store has not failed, and
// its dispatcher is delivering (see dispatch.Dispatcher.Health: not stuck
// in a pass, a flush or a wait it should have woken from). The error says
// which.
func (s *Service) Ready() error {
	s.ingestMu.RLock()
	closing := s.closing
	s.ingestMu.RUnlock()
	switch {
	case closing:
		return unavailable("shutting down")
	case !s.nc.IsConnected():
		return unavailable("not connected to NATS (%s)", s.nc.Status())
	}
	if err := s.storageErr(); err != nil {
		return err
	}
	if err := s.gen.Load().disp.Health(); err != nil {
		return unavailable("%v", err)
	}
	return nil
}

// Repository is the event repository of the current store, for reading
// counts. After a storage fault it is replaced by one on the reopened
// store.
func (s *Service) Repository() *delaystore.Repository { return s.gen.Load().repo }

// Dispatcher is the running dispatcher, for its stats. After a storage
// fault it is replaced by one on the reopened store; see Stats for
// counters that survive that.
func (s *Service) Dispatcher() *dispatch.Dispatcher { return s.gen.Load().disp }

// Stats returns the dispatch counters since New, across storage faults,
// and the deliveries in flight now.
func (s *Service) Stats() dispatch.Stats {
	s.keptMu.Lock()
	d, k := s.gen.Load().disp, s.kept
	s.keptMu.Unlock()
	st := d.Stats()
	st.Delivered += k.Delivered
	st.Redelivered += k.Redelivered
	st.Acked += k.Acked
	st.Nacked += k.Nacked
	st.Progress += k.Progress
	st.Termed += k.Termed
	st.DeadLettered += k.DeadLettered
	st.Expired += k.Expired
	st.Canceled += k.Canceled
	st.NoResponders += k.NoResponders
	st.Undeliverable += k.Undeliverable
	st.Evicted += k.Evicted
	return st
}

// keepStatsLocked adds the counters of a retired dispatcher to kept.
// keptMu must be held.
func (s *Service) keepStatsLocked(d *dispatch.Dispatcher) {
	st := d.Stats()
	k := &s.kept
	k.Delivered += st.Delivered
	k.Redelivered += st.Redelivered
	k.Acked += st.Acked
	k.Nacked += st.Nacked
	k.Progress += st.Progress
	k.Termed += st.Termed
	k.DeadLettered += st.DeadLettered
	k.Expired += st.Expired
	k.Canceled += st.Canceled
	k.NoResponders += st.NoResponders
	k.Undeliverable += st.Undeliverable
	k.Evicted += st.Evicted
}

// Close stops taking messages, commits and answers those already taken,
// stops recovery and delivery (flushing pending deletes), stops the
// janitor, and closes the store. It is safe to call twice; the second call
// returns the result of the first.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.svc != nil {
			errs = append(errs, s.svc.Stop())
		}
		s.ingestMu.Lock()
		s.closing = true
		s.ingestMu.Unlock()
		// NB: recovery stops first, so the generation below is the last.
		close(s.done)
		s.wg.Wait()
		g := s.gen.Load()
		if g != nil {
			g.stopWork()
		}
		for _, sub := range s.ackSubs {
			errs = append(errs, drain(sub, s.nc))
		}
		if g != nil {
			errs = append(errs, g.closeStore())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// drain stops sub taking messages and waits until the ones it holds are
// handled, so requests accepted before Close are still answered. Draining
// needs the server to answer, so without a connection it unsubscribes.
func drain(sub *nats.Subscription, nc *nats.Conn) error {
	if !nc.IsConnected() {
		err := sub.Unsubscribe()
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
			return nil
		}
		return err
	}
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	if err := sub.Drain(); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrBadSubscription) {
			return nil
		}
		return err
	}
	select {
	case <-closed:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("bridge: draining %s: timed out", sub.Subject)
	}
}

func (s *Service) respondErr(m *nats.Msg, err error) {
	if m.Reply == "" {
		return
	}
	_ = s.nc.PublishMsg(errorMsg(m.Reply, err))
}

// Reasons of natsdelay_bad_answers_total: a fixed set, so the label has
// bounded cardinality.
const (
	badAnswerPayload = "payload" // not an ack word the service knows
	badAnswerTag     = "tag"     // not a delivery tag, or Delay-Tag given twice
	badAnswerNoTag   = "no_tag"  // on the ack prefix itself without Delay-Tag
)

// badAnswer reports an answer to a delivery that the service does not
// understand: it settles nothing, so the message is delivered again, and
// the consumer may not know. It is counted by reason, logged at WARN at
// most once per warnInterval with the count of those held back, and
// answered with a 400 when it was a request.
func (s *Service) badAnswer(m *nats.Msg, reason string, err error) {
	if ok, n := s.answerWarn.allow(s.cfg.Now()); ok {
		s.log.Warn("bad answer to a delivery: ignored, the message will be delivered again",
			"reason", reason, "subject", clip(m.Subject), "err", err, "suppressed", n)
	}
	s.m.badAnswers.WithLabelValues(reason).Inc()
	s.respondErr(m, err)
}

func (s *Service) handleIngest(req micro.Request) {
	target := strings.TrimPrefix(req.Subject(), s.cfg.IngestPrefix+".")
	lim := s.lim
	// NB: read per message: a reconnect may reach a server with another.
	lim.serverMaxPayload = int(s.nc.MaxPayload())
	msg, err := parseSchedule(target, nats.Header(req.Headers()), req.Data(), s.cfg.Now(), lim)
	if err != nil {
		s.ingestInvalid(req, err)
		return
	}
	s.ingestMu.RLock()
	defer s.ingestMu.RUnlock()
	if s.closing {
		s.m.ingest.WithLabelValues("unavailable").Inc()
		respondError(req, unavailable("shutting down"))
		return
	}
	if err := s.storageErr(); err != nil {
		s.m.ingest.WithLabelValues("unavailable").Inc()
		respondError(req, err)
		return
	}
	s.gen.Load().w.submit(ingestRequest{msg: msg, req: req})
}

func (s *Service) ingestInvalid(req micro.Request, err error) {
	s.m.ingest.WithLabelValues("invalid").Inc()
	if req.Reply() == "" {
		if ok, n := s.invalidWarn.allow(s.cfg.Now()); ok {
			s.log.Warn("invalid message without a reply subject: dropped",
				"subject", clip(req.Subject()), "err", err, "suppressed", n)
		}
		s.invalid.Add(1)
		return
	}
	respondError(req, err)
}

func (s *Service) handleAck(m *nats.Msg) {
	if s.pub.marker(m.Subject) {
		return
	}
	var tag string
	if m.Subject == s.cfg.AckPrefix {
		v, ok, err := controlValue(m.Header, HeaderTag)
		if err != nil || !ok {
			reason := badAnswerNoTag
			if ok {
				reason = badAnswerTag
			}
			s.badAnswer(m, reason, badRequest("ack on %s needs a %s header with the delivery tag", s.cfg.AckPrefix, HeaderTag))
			return
		}
		tag = v
	} else {
		tag = m.Subject[len(s.cfg.AckPrefix)+1:]
	}
	key, err := keys.ParseTag(tag)
	if err != nil {
		s.badAnswer(m, badAnswerTag, badRequest("%v", err))
		return
	}
	g := s.gen.Load()
	if g == nil {
		// NB: the first generation delivers before New stores it, so an
		// answer to a message due at startup can arrive first. Wait for
		// it rather than drop the answer: a dropped ACK would mean a
		// redelivery after the ack wait.
		select {
		case <-s.started:
		case <-s.done:
		}
		if g = s.gen.Load(); g == nil {
			s.respondErr(m, unavailable("starting"))
			return
		}
	}
	if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
		// NB: the server's no-responders notice has no reply subject, and
		// comes before the delivery is known to have reached anyone; any
		// other is a consumer's answer that only looks like it.
		if m.Reply == "" && g.disp.NoResponders(key) {
			return
		}
		s.respondErr(m, badRequest("ack with a Status: 503 header and no payload: only the server's no-responders notice looks like that; want empty, +ACK, -NAK, -NAK <delay>, +WPI or +TERM [reason]"))
		return
	}
	ack, err := parseAck(m.Data)
	if err != nil {
		s.badAnswer(m, badAnswerPayload, err)
		return
	}
	if err := s.storageErr(); err != nil {
		// The answer cannot be stored: the message is delivered again
		// once the store is back.
		if m.Reply != "" {
			_ = s.nc.PublishMsg(errorMsg(m.Reply, err))
		}
		return
	}
	reply := m.Reply
	g.disp.Ack(key, ack, func(err error) {
		if reply == "" {
			return
		}
		if err != nil && !errors.Is(err, dispatch.ErrUnknownTag) && !errors.Is(err, dispatch.ErrNotInFlight) {
			_ = s.nc.PublishMsg(errorMsg(reply, unavailable("ack not applied: %v", err)))
			return
		}
		_ = s.nc.Publish(reply, []byte("+OK"))
	})
}

// Cancel deletes a pending message so it is never delivered.
func (s *Service) Cancel(ctx context.Context, k keys.Key) (bool, error) {
	if err := s.storageErr(); err != nil {
		return false, err
	}
	return s.gen.Load().disp.Cancel(ctx, k)
}
