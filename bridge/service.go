package bridge

import (
	"cmp"
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
	"go.opentelemetry.io/otel/trace"

	"github.com/natsdelay/natsdelay/bridge/events"
	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/janitor"
	"github.com/natsdelay/natsdelay/keys"
)

// Config configures a Service: what it is told, settings only. What it
// uses besides its connection and store (metrics registry, cluster,
// reopen) is given to New as an Option. A zero field means the default
// shown by DefaultConfig.
type Config struct {
	// Delivery holds the delivery settings (AckWait, MaxDeliver, Backoff,
	// DeadLetterSubject, MaxInFlight, ...). Its Observer, Lifecycle and
	// Fence are the Service's own, which it sets, and its Now and Logger
	// are Config's: what they hold here is not used.
	Delivery dispatch.Config
	// Repository holds TimeBucket, the width of the time bucket in keys.
	// It must not change for an existing store.
	Repository delaystore.RepositoryConfig
	// Expiry configures the removal of expired messages and of old dead
	// letters: Interval is how often (default 1s).
	Expiry janitor.Config

	// Limits are limits that exist from the start: each time the service
	// starts on its store (New, a reopen after a fault, each time a node
	// of a cluster becomes leader), each one whose pattern has no stored
	// limit is stored. A limit stored already, set or changed through
	// the API since, is kept as it is; one deleted is stored again at the
	// next start. Validate checks them.
	Limits []delaystore.Limit

	// ReopenBackoff is the wait after the first failed reopen of the
	// store (see WithReopen); it doubles up to ReopenMaxBackoff. Defaults
	// 100ms and 5s.
	ReopenBackoff    time.Duration
	ReopenMaxBackoff time.Duration

	// MaxBatch bounds the messages of one group commit. Default 4096.
	MaxBatch int
	// MaxBatchBytes bounds the bytes of one group commit (payloads,
	// subjects, headers), and twice it the bytes waiting to be committed.
	// Default 64 MiB.
	MaxBatchBytes int

	// IdleRelease is how long the service waits, once quiet after a burst
	// of writes, before it hands memory back to the operating system (the
	// store's memtables, the Go heap's free pages); once per burst of at
	// least 10,000 writes. Negative turns it off. Default 10s.
	IdleRelease time.Duration

	// DedupWindow is how long after a message is stored a resend of it
	// is answered with the first answer and stores nothing: the same
	// (subject, Nats-Msg-Id), or the same (subject, Delay-Id) with the
	// same content. Negative turns it off. Default 2m, as JetStream's
	// duplicate window.
	DedupWindow time.Duration

	// Now is the clock; nil means time.Now. It is also the dispatcher's,
	// the janitor's and the events'.
	Now func() time.Time
	// Logger receives logs; nil discards them.
	Logger *slog.Logger

	// Engine names the store's engine, for INFO.
	Engine string

	// IngestPrefix is the prefix publishers send to. Default "delay".
	IngestPrefix string
	// AckPrefix is the prefix of delivery reply subjects. Default "$DELAY.ACK".
	AckPrefix string
	// APIPrefix is the prefix of the API. Default "$DELAY.API".
	APIPrefix string
	// JSSchedulePrefix is the prefix of JetStream's schedule subjects:
	// a publish to <prefix>.<schedule subject> with Nats-Schedule is
	// taken as a stream with message schedules takes it (jsschedule.go).
	// Default "$DELAY.JS".
	JSSchedulePrefix string
	// QueueGroup is the queue group of the ingest subscription. Default
	// "natsdelay".
	QueueGroup string

	// Events turns lifecycle events on: what happens to each message
	// (scheduled, delivered, acked, nak, term, expired, dead, canceled,
	// and the kinds Events().Emit is told) is published, best effort, to
	// <EventPrefix>.<kind>.<subject>; see package bridge/events. Off (the
	// default) costs nothing on the paths that would tell them.
	Events bool
	// EventPrefix is the prefix of lifecycle events; ingest refuses
	// targets inside it. Default "$DELAY.EVENT".
	EventPrefix string
	// EventBuffer bounds the lifecycle events waiting to be published;
	// past it they are dropped and counted
	// (natsdelay_events_dropped_total). Default 8192.
	EventBuffer int
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

	// ClusterStatusWait is how long INFO waits for the members' answers
	// to CLUSTER.STATUS. Default 500ms.
	ClusterStatusWait time.Duration
}

// DefaultConfig returns every default in one place, core's included.
func DefaultConfig() Config {
	cc := core.DefaultConfig()
	return Config{
		Delivery:         cc.Delivery,
		Repository:       cc.Repository,
		Expiry:           cc.Expiry,
		ReopenBackoff:    cc.ReopenBackoff,
		ReopenMaxBackoff: cc.ReopenMaxBackoff,
		MaxBatch:         cc.MaxBatch,
		MaxBatchBytes:    cc.MaxBatchBytes,
		IdleRelease:      cc.IdleRelease,
		DedupWindow:      cc.DedupWindow,
		IngestPrefix:     wire.DefaultIngestPrefix,
		JSSchedulePrefix: wire.DefaultJSSchedulePrefix,
		AckPrefix:        wire.DefaultAckPrefix,
		APIPrefix:        wire.DefaultAPIPrefix,
		EventPrefix:      wire.DefaultEventPrefix,
		EventBuffer:      events.DefaultBuffer,
		QueueGroup:       "natsdelay",
		MaxControlLine:   DefaultMaxControlLine,
	}
}

// core is the configuration of the Service's core: the settings of
// delivery, keys, expiry, group commit and recovery that c holds. The
// dispatcher's dependencies are the Service's to give (see start).
func (c Config) core() core.Config {
	d := c.Delivery
	d.Observer, d.Lifecycle, d.Fence, d.Frozen = nil, nil, nil, nil
	return core.Config{
		Delivery: d, Repository: c.Repository, Expiry: c.Expiry, Limits: c.Limits,
		ReopenBackoff: c.ReopenBackoff, ReopenMaxBackoff: c.ReopenMaxBackoff,
		MaxBatch: c.MaxBatch, MaxBatchBytes: c.MaxBatchBytes,
		IdleRelease: c.IdleRelease, DedupWindow: c.DedupWindow,
		Now: c.Now, Logger: c.Logger,
	}
}

func (c Config) withDefaults(nc *nats.Conn) Config {
	d := DefaultConfig()
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.IngestPrefix, d.IngestPrefix)
	def(&c.JSSchedulePrefix, d.JSSchedulePrefix)
	def(&c.AckPrefix, d.AckPrefix)
	def(&c.APIPrefix, d.APIPrefix)
	def(&c.EventPrefix, d.EventPrefix)
	c.EventBuffer = cmp.Or(c.EventBuffer, d.EventBuffer)
	def(&c.QueueGroup, d.QueueGroup)
	c.MaxControlLine = cmp.Or(c.MaxControlLine, d.MaxControlLine)
	c.ClusterStatusWait = cmp.Or(c.ClusterStatusWait, defaultClusterStatusWait)
	if c.MaxPayload == 0 && nc != nil {
		c.MaxPayload = int(nc.MaxPayload())
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every bad setting at once, core's included, each
// wrapping ErrInvalidConfig. It does not ask for Conn and Store, so a
// program can check its settings before it connects or opens anything;
// New does.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, p := range []struct{ name, v string }{{"IngestPrefix", c.IngestPrefix}, {"JSSchedulePrefix", c.JSSchedulePrefix}, {"AckPrefix", c.AckPrefix}, {"APIPrefix", c.APIPrefix}, {"EventPrefix", c.EventPrefix}} {
		if p.v == "" {
			continue
		}
		if err := checkTarget(p.v, nil); err != nil {
			bad("%s (%q) must be a concrete subject without wildcards", p.name, p.v)
		}
	}
	if in, js := c.IngestPrefix, c.JSSchedulePrefix; in != "" && js != "" && (checkTarget(in, []string{js}) != nil || checkTarget(js, []string{in}) != nil) {
		// Both endpoints would take the same publishes.
		bad("JSSchedulePrefix (%q) and IngestPrefix (%q) must not be one inside the other", js, in)
	}
	if c.Delivery.DeadLetterSubject != "" {
		if err := checkTarget(c.Delivery.DeadLetterSubject, nil); err != nil {
			bad("DeadLetterSubject (%q) must be a concrete subject without wildcards", c.Delivery.DeadLetterSubject)
		}
	}
	if c.MaxPayload < 0 {
		bad("MaxPayload (%d) must be > 0", c.MaxPayload)
	}
	if c.MaxControlLine < 0 {
		bad("MaxControlLine (%d) must be > 0", c.MaxControlLine)
	}
	if c.ClusterStatusWait < 0 {
		bad("ClusterStatusWait (%v) must be > 0", c.ClusterStatusWait)
	}
	if c.EventBuffer < 0 {
		bad("EventBuffer (%d) must be > 0", c.EventBuffer)
	}
	// NB: prefixes so long that no delivery or dead letter fits the
	// server's control line would make every ingest a 400; say so once.
	mcl := cmp.Or(c.MaxControlLine, DefaultMaxControlLine)
	ack := cmp.Or(c.AckPrefix, wire.DefaultAckPrefix)
	const hdrSize, totalSize = 99999, 99999999 // wide enough
	if n := controlLineLen("x", ack+"."+strings.Repeat("0", keys.TagLen), hdrSize, totalSize); n > mcl {
		bad("AckPrefix is %d bytes: a delivery to a one-byte subject would need a %d-byte protocol line, over MaxControlLine %d", len(ack), n, mcl)
	}
	if dl := c.Delivery.DeadLetterSubject; dl != "" {
		if n := controlLineLen(dl, "", hdrSize, totalSize); n > mcl {
			bad("DeadLetterSubject is %d bytes: a dead letter would need a %d-byte protocol line, over MaxControlLine %d", len(dl), n, mcl)
		}
	}
	seen := map[string]int{}
	for i, l := range c.Limits {
		for _, p := range CheckLimit(wireLimit(l), c.Delivery.MaxInFlight) {
			bad("Limits[%d] (pattern %q): %s", i, keys.Clip(l.Pattern), p)
		}
		if j, ok := seen[l.Pattern]; ok {
			bad("Limits[%d] (pattern %q): given twice, first as Limits[%d]", i, keys.Clip(l.Pattern), j)
		}
		seen[l.Pattern] = i
	}
	if err := c.core().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Service is a running natsdelay on NATS: it takes messages on the ingest
// prefix and hands them to its core, publishes deliveries, takes the
// answers to them, and serves the API. Its core (package core) runs the
// store and what works on it, and recovers from storage faults (see
// core.Service). It is safe for concurrent use.
type Service struct {
	cfg   Config
	store delaystore.Store // the core's from New on
	log   *slog.Logger
	nc    *nats.Conn
	pub   *publisher
	lim   scheduleLimits
	m     *metrics
	// events publishes lifecycle events; nil when they are off, which
	// every caller of its Emit relies on.
	events *events.Publisher
	// tracerProvider records spans of traced messages; see
	// WithTracerProvider. tracer is nil without one, and each path that
	// would record a span checks it and does nothing more.
	tracerProvider trace.TracerProvider
	tracer         *tracer
	// registerer receives the metrics; nil keeps them unregistered.
	registerer prometheus.Registerer
	// cluster is set on a node of a cluster; see WithCluster.
	cluster Cluster
	// reopen opens the store again after a fault; see WithReopen.
	reopen func() (delaystore.Store, error)
	// answers publishes the answers that the writer and the deleter
	// hand over: to ingest requests and to consumers' AckSyncs.
	answers *answerer
	// backups runs the BACKUP streams.
	backups backups
	// frozen are the topics held still for a fleet; see SetFrozen.
	frozen frozenTopics
	// held are the topics whose deliveries wait; see Drain.
	held heldTopics

	// core is set once New has opened it; see started.
	core atomic.Pointer[core.Service]

	// serveMu guards what is subscribed while the Service serves: the
	// micro service and the ack subscriptions. A node of a cluster
	// subscribes and drains them as it gains and loses leadership.
	serveMu sync.Mutex
	serving bool
	// onServe runs each time a node of a cluster starts to serve; see
	// OnServe.
	onServe func() error
	// leading is set once a node of a cluster serves as leader, and
	// cleared the moment it stops: read without serveMu, which a
	// leadership change holds while the store opens.
	leading atomic.Bool
	// lease is the lease check of the leadership this node serves in
	// (Cluster.LeaseCheck), nil while it does not serve.
	lease   atomic.Pointer[func() bool]
	svc     micro.Service
	ackSubs []*nats.Subscription
	// statusSub answers CLUSTER.STATUS on a node of a cluster; stopWatch
	// ends its leadership watch.
	statusSub *nats.Subscription
	stopWatch func()
	// closeCtx ends when Close begins, so that a leadership change under
	// way does not hold Close up.
	closeCtx    context.Context
	cancelClose context.CancelFunc

	closing   atomic.Bool
	closeOnce sync.Once
	closeErr  error
	invalid   atomic.Uint64 // invalid plain publishes (no reply to tell)
	// invalidWarn and answerWarn limit the warnings about invalid plain
	// publishes and bad answers to deliveries.
	invalidWarn rateLimit
	answerWarn  rateLimit
	// streamWarn limits the warnings about streams that refuse deliveries.
	streamWarn rateLimit

	// started is closed once New has opened the core; done when Close
	// begins.
	started chan struct{}
	done    chan struct{}
}

// New serves on the NATS connection nc the messages kept in store, which
// the Service owns from here on (Close closes it, also when New fails): it
// subscribes to the ack prefix, opens the core over store (which starts
// delivering), registers the micro service with the ingest endpoint and
// the API, and registers the metrics (see WithRegisterer). On error
// everything started is stopped and the store is closed. cfg holds the
// settings; opts give what the Service uses besides nc and store.
//
// The Service does not close nc. nc must not be created with nats.NoEcho:
// the service hears its own flush markers and the server's no-responders
// answers on it.
func New(nc *nats.Conn, store delaystore.Store, cfg Config, opts ...Option) (*Service, error) {
	err := cfg.Validate()
	if nc == nil {
		err = errors.Join(err, fmt.Errorf("%w: no NATS connection", ErrInvalidConfig))
	}
	if store == nil {
		err = errors.Join(err, fmt.Errorf("%w: no store", ErrInvalidConfig))
	}
	if err != nil {
		if store != nil {
			err = errors.Join(err, store.Close())
		}
		return nil, err
	}
	cfg = cfg.withDefaults(nc)
	s := &Service{
		cfg: cfg, store: store, log: cfg.Logger.With("component", "bridge"), nc: nc, m: newMetrics(),
		started: make(chan struct{}), done: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.closeCtx, s.cancelClose = context.WithCancel(context.Background())
	s.answers = newAnswerer(nc, answerQueue, answerWait)
	s.lim = scheduleLimits{
		maxPayload: cfg.MaxPayload, reserved: []string{cfg.IngestPrefix, cfg.JSSchedulePrefix, cfg.AckPrefix, cfg.APIPrefix, cfg.EventPrefix, "$SRV"},
		ackPrefix: cfg.AckPrefix, deadLetter: cfg.Delivery.DeadLetterSubject, maxControlLine: cfg.MaxControlLine,
	}
	if err := s.start(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// An Option gives New a dependency of the Service: something it uses,
// where Config holds what it is told.
type Option func(*Service)

// WithRegisterer registers the service's Prometheus metrics with r.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(s *Service) { s.registerer = r }
}

// WithTracerProvider makes the Service record, through tp, the spans of
// the messages whose publish carried a W3C traceparent: their ingest,
// each delivery attempt and the answers to them (see SpanIngest,
// SpanDeliver, SpanAck), and deliver them with the traceparent of their
// delivery's span. Without it the Service records nothing, and a
// delivery carries the headers as they were published. The Service does
// not shut tp down.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Service) { s.tracerProvider = tp }
}

// WithCluster makes the Service a node of the cluster c: it serves
// ingest, acks and the API, and delivers, only while c says this node
// leads, and answers CLUSTER.STATUS always. The store given to New must
// then be the cluster's replicated store, and WithReopen's return it
// again: the core is suspended while the node follows, and resumed on it
// when the node becomes leader.
func WithCluster(c Cluster) Option {
	return func(s *Service) { s.cluster = c }
}

// WithReopen gives the Service reopen, which opens the store again, with
// the same settings, after a write to disk failed it, and on a node of a
// cluster each time it becomes leader (see core.WithReopen). Without it a
// storage fault leaves the Service unavailable until it is closed.
func WithReopen(reopen func() (delaystore.Store, error)) Option {
	return func(s *Service) { s.reopen = reopen }
}

func (s *Service) start() error {
	s.pub = newPublisher(s.nc, s.cfg.AckPrefix, s.cfg.MaxControlLine)
	if s.tracerProvider != nil {
		s.tracer = newTracer(s.tracerProvider, 2*cmp.Or(s.cfg.Delivery.MaxInFlight, dispatch.DefaultConfig().MaxInFlight)+1024)
		s.pub.tracer = s.tracer
	}
	cc := s.cfg.core()
	cc.Delivery.Observer = s.m
	cc.Delivery.Frozen = s.undelivered
	if s.cfg.Events {
		ec := events.Config{Prefix: s.cfg.EventPrefix, Buffer: s.cfg.EventBuffer, Now: s.cfg.Now, Logger: s.cfg.Logger}
		if s.cluster != nil {
			ec.Fence = s.holdsLease // only the leader tells
		}
		ev, err := events.New(s.nc, ec)
		if err != nil {
			s.closeUnstarted()
			return err
		}
		s.events = ev
		cc.Delivery.Lifecycle = dispatch.LifecycleFunc(s.lifecycle)
	}
	if s.cluster != nil {
		// Deliveries and dead letters go out only under the lease.
		cc.Delivery.Fence = s.holdsLease
		s.pub.fence = s.holdsLease
		return s.startNode(cc)
	}
	// The ack subscriptions come first: deliveries rely on them for
	// no-responders answers and flush markers.
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	s.serving = true
	if err := s.subscribeAcks(); err != nil {
		s.closeUnstarted()
		return err
	}
	c, err := core.Open(s.store, s.pub, cc, core.WithMetrics(s.m), core.WithReopen(s.reopen))
	if err != nil {
		return err
	}
	s.core.Store(c)
	close(s.started)
	if err := s.registerMetrics(); err != nil {
		return err
	}
	if err := s.register(); err != nil {
		return err
	}
	return s.nc.Flush()
}

// startNode starts a node of a cluster: its core suspended until the node
// leads, its answers to CLUSTER.STATUS, and the watch of its leadership,
// which starts and stops serving (see onLeadership).
func (s *Service) startNode(cc core.Config) error {
	cc.StartSuspended = errNotLeader
	c, err := core.Open(s.store, s.pub, cc, core.WithMetrics(s.m), core.WithReopen(s.reopen))
	if err != nil {
		return err
	}
	s.core.Store(c)
	close(s.started)
	if err := s.registerMetrics(); err != nil {
		return err
	}
	subj := s.cfg.APIPrefix + "." + wire.VerbClusterStatus
	if s.statusSub, err = s.nc.Subscribe(subj, s.handleClusterStatus); err != nil {
		return fmt.Errorf("bridge: subscribe %s: %w", subj, err)
	}
	if err := s.nc.Flush(); err != nil {
		return err
	}
	s.stopWatch = s.cluster.WatchLeadership(s.onLeadership)
	return nil
}

func (s *Service) registerMetrics() error {
	if s.registerer == nil {
		return nil
	}
	if err := s.m.register(s.registerer, s); err != nil {
		return fmt.Errorf("bridge: register metrics: %w", err)
	}
	return nil
}

// subscribeAcks subscribes to the ack prefix. serveMu must be held.
//
// What legitimately arrives on them is bounded by the in-flight window:
// an answer or a no-responders notice per delivery, and a flush marker
// per pass. They hold twice that; more is a flood (publishers of
// garbage on the ack prefix), which nats.go then drops, reporting a
// slow consumer, rather than let a backlog delay the answers and
// markers queued behind it for minutes. A dropped answer or notice
// only means a redelivery: at least once holds.
func (s *Service) subscribeAcks() error {
	window := s.cfg.Delivery.MaxInFlight
	if window == 0 {
		window = dispatch.DefaultConfig().MaxInFlight
	}
	ackPending := 2*window + 1024
	for _, sub := range []struct {
		subject string
		h       nats.MsgHandler
	}{{s.cfg.AckPrefix + ".>", s.handleAckSubject}, {s.cfg.AckPrefix, s.handleAckHeader}} {
		ns, err := s.nc.Subscribe(sub.subject, sub.h)
		if err != nil {
			return fmt.Errorf("bridge: subscribe %s: %w", sub.subject, err)
		}
		_ = ns.SetPendingLimits(ackPending, 64<<20)
		s.ackSubs = append(s.ackSubs, ns)
	}
	return nil
}

// closeUnstarted closes the store when New fails before the core owns it.
func (s *Service) closeUnstarted() {
	if err := s.store.Close(); err != nil {
		s.log.Warn("closing the store", "err", err)
	}
}

// Ready reports whether the service can take and deliver messages: it is
// not closing, its NATS connection is up, its store has not failed, and
// its dispatcher is delivering (see dispatch.Dispatcher.Health: not stuck
// in a pass, a flush or a wait it should have woken from). The error says
// which.
//
// A node of a cluster that does not lead is ready while its connection is
// up, its node runs, and its store keeps up with the leader (see
// raftstore.Config.MaxLag): a follower is healthy, it just does not
// serve; Leader tells them apart.
func (s *Service) Ready() error {
	switch {
	case s.closing.Load():
		return unavailable("shutting down")
	case !s.nc.IsConnected():
		return unavailable("not connected to NATS (%s)", s.nc.Status())
	}
	if s.cluster != nil && !s.Leader() {
		// A follower is healthy: it replicates, and answers its
		// status; it just does not serve. Leader tells them apart.
		st := s.cluster.Status()
		switch {
		case st.Err != "":
			return unavailable("cluster node stopped: %s", st.Err)
		case st.Role == wire.RoleShutdown:
			return unavailable("cluster node shut down")
		case st.Behind != "":
			return unavailable("cluster node %s", st.Behind)
		}
		return nil
	}
	return s.core.Load().Ready()
}

// Stats returns the dispatch counters since New, across storage faults,
// and the deliveries in flight now.
func (s *Service) Stats() dispatch.Stats { return s.core.Load().Stats() }

// Close shuts down in this order: the micro service's endpoints drain
// (ingest and API requests already taken are answered), the core stops
// (the writer commits and answers what it took, the janitor stops, the
// dispatcher finishes its publishes and flushes pending deletes), the ack
// subscriptions drain (the dispatcher needed them until then for flush
// markers and no-responders notices), the store closes, and last the
// answerer publishes the answers queued and stops. It is
// safe to call twice; the second call returns the result of the first.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		// A node first stops watching its leadership, so that it does
		// not start serving again while it closes.
		s.cancelClose()
		if s.stopWatch != nil {
			s.stopWatch()
		}
		s.serveMu.Lock()
		defer s.serveMu.Unlock()
		if s.svc != nil {
			errs = append(errs, s.svc.Stop())
		}
		s.closing.Store(true)
		close(s.done)
		// A backup stream reads the store: it ends with closeCtx.
		s.backups.close()
		c := s.core.Load()
		if c != nil {
			c.Stop()
		}
		for _, sub := range s.ackSubs {
			errs = append(errs, drain(sub, s.nc))
		}
		if s.statusSub != nil {
			errs = append(errs, drain(s.statusSub, s.nc))
		}
		// NB: nothing tells events any more: the core has stopped and
		// the acks are drained. What is queued is published.
		s.events.Close()
		if c != nil {
			errs = append(errs, c.Close())
		}
		// Last: until the core closed, its deleter could still settle
		// an answer taken before the drain. What is queued goes out.
		s.answers.Close()
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

// replyOK is the answer to an AckSync that was applied.
var replyOK = []byte(wire.ReplyOK)

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
			"reason", reason, "subject", keys.Clip(m.Subject), "err", err, "suppressed", n)
	}
	s.m.badAnswers.WithLabelValues(reason).Inc()
	s.respondErr(m, err)
}

// NB: a write would fail on a node that no longer leads (Raft refuses
// it), but one whose lease lapsed may not read its store either (a
// duplicate's first answer): Ingest answers the 503 of answering.
func (s *Service) handleIngest(req micro.Request) { s.Ingest(req) }

// ingest schedules the message req, for a node that may answer it.
func (s *Service) ingest(req micro.Request) {
	if p, ok := s.parseIngest(req); ok {
		s.commitIngest(p.req, p.once, p.span, false)
	}
}

// parsedIngest is a request to schedule, parsed and not yet handed to
// the group commit.
type parsedIngest struct {
	req  micro.Request
	once delaystore.Once
	span trace.Span
}

// parseIngest parses the message req. A message that is not valid is
// answered here, and ok is false.
func (s *Service) parseIngest(req micro.Request) (p parsedIngest, ok bool) {
	target := strings.TrimPrefix(req.Subject(), s.cfg.IngestPrefix+".")
	lim := s.lim
	// Read per message: a reconnect may reach a server with another.
	lim.serverMaxPayload = int(s.nc.MaxPayload())
	h := nats.Header(req.Headers())
	var span trace.Span
	if s.tracer != nil {
		span = s.tracer.ingest(h, target)
	}
	msg, err := parseSchedule(target, h, req.Data(), s.cfg.Now(), lim)
	once := delaystore.Once{Msg: msg}
	if err == nil && s.cfg.DedupWindow >= 0 {
		once, err = onceOf(msg, h)
	}
	if err != nil {
		if span != nil {
			endIngest(span, delaystore.Outcome{}, err)
		}
		s.ingestInvalid(req, err)
		return parsedIngest{}, false
	}
	return parsedIngest{req: req, once: once, span: span}, true
}

// commitIngest stores the message of once, parsed from req, and answers
// req once it is committed: with the service's own replies, or with
// JetStream's PubAck and API errors when js (see jsschedule.go).
func (s *Service) commitIngest(req micro.Request, once delaystore.Once, span trace.Span, js bool) {
	s.frozen.gate.RLock() // released once the message is stored or refused
	if s.refuseFrozen(req, once.Msg, span, js) {
		s.frozen.gate.RUnlock()
		return
	}
	if err := s.core.Load().ScheduleOnce(once, s.ingestDone(req, once.Msg, span, js, nil)); err != nil {
		s.frozen.gate.RUnlock()
		s.refuseCommit(req, span, err, js)
	}
}

// refuseFrozen answers req, whose message is msg, with a 503 if the
// partition of its subject is moving between cells, and reports whether
// it did. The caller holds the frozen gate for reading.
func (s *Service) refuseFrozen(req micro.Request, msg *delaystore.StoredMessage, span trace.Span, js bool) bool {
	if !s.frozen.frozen(keys.TopicHash(msg.Subject)) {
		return false
	}
	s.refuseCommit(req, span, s.frozenError(fmt.Sprintf("the partition of subject %q", keys.Clip(msg.Subject))), js)
	return true
}

// refuseCommit answers req with err, a 503, for a message not handed to
// the group commit.
func (s *Service) refuseCommit(req micro.Request, span trace.Span, err error, js bool) {
	if span != nil {
		endIngest(span, delaystore.Outcome{}, err)
	}
	s.m.ingest.WithLabelValues("unavailable").Inc()
	s.refuseIngest(req, err, js)
}

// ingestDone returns what the group commit tells of msg, parsed from
// req, once its batch is committed: it lets go of the frozen gate, held
// for msg (or, with left, once for the hand-over of left messages, when
// the last is told), then answers req. One closure does both, where a
// second that wrapped it was an allocation for every publish.
func (s *Service) ingestDone(req micro.Request, msg *delaystore.StoredMessage, span trace.Span, js bool, left *atomic.Int64) core.OnceFunc {
	// The answer goes out on the connection, not through req: the group
	// commit's goroutine hands it to the answerer after the handler
	// returned, and micro's request records an error answer in a field
	// that its handler reads once the handler returns.
	reply := req.Reply()
	return func(res delaystore.Outcome, err error) {
		if left == nil || left.Add(-1) == 0 {
			s.frozen.gate.RUnlock()
		}
		if span != nil {
			endIngest(span, res, err)
		}
		if err == nil && res.Folded {
			s.m.folded()
		}
		if err == nil && res.Duplicate {
			s.m.ingest.WithLabelValues("duplicate").Inc()
		} else if err == nil && s.events != nil {
			s.events.Emit(events.Of(events.Scheduled, res.Key, msg, 0))
		}
		switch {
		case reply == "":
		case js:
			s.answers.reply(reply, jsAnswer(res, err))
		case err != nil:
			s.answers.fail(reply, err)
		case res.Duplicate:
			s.answers.reply(reply, duplicateReply(res, msg.Subject))
		case res.Folded:
			s.answers.reply(reply, foldedReply(res, msg.Subject))
		default:
			buf := replyBufs.Get().(*[]byte)
			*buf = appendScheduleReply((*buf)[:0], res.Key, msg)
			s.answers.replyBuf(reply, buf)
		}
	}
}

// refuseIngest answers req with err: in the service's own error
// convention, or as a JetStream API error when js.
func (s *Service) refuseIngest(req micro.Request, err error, js bool) {
	if !js {
		respondError(req, err)
		return
	}
	if req.Reply() != "" {
		_ = req.Respond(jsAnswer(delaystore.Outcome{}, err))
	}
}

func (s *Service) ingestInvalid(req micro.Request, err error) {
	s.m.ingest.WithLabelValues("invalid").Inc()
	if req.Reply() == "" {
		if ok, n := s.invalidWarn.allow(s.cfg.Now()); ok {
			s.log.Warn("invalid message without a reply subject: dropped",
				"subject", keys.Clip(req.Subject()), "err", err, "suppressed", n)
		}
		s.invalid.Add(1)
		return
	}
	respondError(req, err)
}

// handleAckSubject takes the traffic on <ack prefix>.>, which is of three
// kinds: the publisher's flush markers, the server's no-responders notices
// for deliveries, and consumers' answers to deliveries, with the tag in
// the subject. See doc.go.
func (s *Service) handleAckSubject(m *nats.Msg) {
	if s.pub.marker(m.Subject) {
		return // a flush marker: the publisher has seen it
	}
	s.handleTag(m, m.Subject[len(s.cfg.AckPrefix)+1:])
}

// handleAckHeader takes the traffic on <ack prefix> itself: consumers'
// answers with the tag in the Delay-Tag header.
func (s *Service) handleAckHeader(m *nats.Msg) {
	v, ok, err := controlValue(m.Header, wire.HeaderTag)
	if err != nil || !ok {
		reason := badAnswerNoTag
		if ok {
			reason = badAnswerTag
		}
		s.badAnswer(m, reason, badRequest("ack on %s needs a %s header with the delivery tag", s.cfg.AckPrefix, wire.HeaderTag))
		return
	}
	s.handleTag(m, v)
}

// handleTag hands m, about the delivery tag, to the handler of its kind:
// a no-responders notice, or a consumer's answer.
func (s *Service) handleTag(m *nats.Msg, tag string) {
	key, err := keys.ParseTag(tag)
	if err != nil {
		s.badAnswer(m, badAnswerTag, badTag("delivery tag", err))
		return
	}
	if s.frozen.frozen(key.TopicHash()) {
		return // see frozenTopics: the message stays as it is, unanswered
	}
	if isNoResponders(m) {
		s.handleNoResponders(m, key)
		return
	}
	s.handleAnswer(m, key)
}

// isNoResponders reports whether m looks like the server's no-responders
// notice: a Status: 503 header and no payload.
func isNoResponders(m *nats.Msg) bool {
	return m.Header.Get("Status") == "503" && len(m.Data) == 0
}

// handleNoResponders tells the core that the delivery key reached nobody.
func (s *Service) handleNoResponders(m *nats.Msg, key keys.Key) {
	c := s.waitCore(m)
	if c == nil {
		return
	}
	// The server's notice has no reply subject, and comes before the
	// delivery is known to have reached anyone; any other is a consumer's
	// answer that only looks like it.
	if m.Reply == "" && c.NoResponders(key) {
		return
	}
	s.respondErr(m, badRequest("ack with a Status: 503 header and no payload: only the server's no-responders notice looks like that; want empty, +ACK, -NAK, -NAK <delay>, +WPI or +TERM [reason]"))
}

// handleAnswer applies a consumer's answer to the delivery key.
func (s *Service) handleAnswer(m *nats.Msg, key keys.Key) {
	c := s.waitCore(m)
	if c == nil {
		return
	}
	ack, err := parseAck(m.Data)
	if err != nil {
		if a, ok := parseStreamAnswer(m.Data); ok {
			s.handleStreamAnswer(c, key, a)
			return
		}
		s.badAnswer(m, badAnswerPayload, err)
		return
	}
	reply := m.Reply
	var done func(error)
	if reply != "" {
		done = func(err error) {
			if err != nil {
				s.answers.fail(reply, err)
				return
			}
			s.answers.reply(reply, replyOK)
		}
	}
	var end func(error)
	if s.tracer != nil {
		if end = s.tracer.answer(key, ack); end != nil {
			done = thenDone(end, done)
		}
	}
	// When the answer cannot be stored the message is delivered again
	// once the store is back.
	if err := c.Ack(key, ack, done); err != nil {
		if end != nil {
			end(err)
		}
		s.respondErr(m, err)
	}
}

// waitCore returns the core, waiting for New to open it: the first
// generation delivers before New stores it, so an answer to a message due
// at startup can arrive first. Waiting rather than dropping the answer
// spares a redelivery after the ack wait. It answers m and returns nil if
// the Service closed first.
func (s *Service) waitCore(m *nats.Msg) *core.Service {
	if c := s.core.Load(); c != nil {
		return c
	}
	select {
	case <-s.started:
	case <-s.done:
	}
	c := s.core.Load()
	if c == nil {
		s.respondErr(m, unavailable("starting"))
	}
	return c
}

// Cancel deletes a pending message so it is never delivered. It returns
// false if there is none under k.
func (s *Service) Cancel(ctx context.Context, k keys.Key) (bool, error) {
	err := s.core.Load().Cancel(ctx, k)
	if errors.Is(err, wire.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Events is the publisher of lifecycle events, or nil when they are off
// (Config.Events): Emit on nil does nothing, so code that makes something
// happen to a message (a reschedule, a replay) tells it with
// s.Events().Emit(events.Of(events.Rescheduled, k, msg, attempt)) and
// pays nothing when events are off.
func (s *Service) Events() *events.Publisher { return s.events }

// lifecycle tells the dispatcher's lifecycle events as events.
func (s *Service) lifecycle(e dispatch.LifecycleEvent) {
	ev := events.Event{Kind: lifecycleKinds[e.Kind], Tag: e.Key, Subject: e.Subject, ID: e.ID, Attempt: e.Attempt,
		FireAt: time.Unix(0, e.FireAtNs), Reason: e.Reason, TraceID: e.TraceID}
	if e.AtNs != 0 {
		ev.At = time.Unix(0, e.AtNs)
	}
	s.events.Emit(ev)
}

// lifecycleKinds are the event kinds of the dispatcher's lifecycle kinds.
var lifecycleKinds = [...]events.Kind{
	dispatch.Delivered: events.Delivered, dispatch.Acked: events.Acked, dispatch.Naked: events.Nak,
	dispatch.Termed: events.Term, dispatch.Expired: events.Expired, dispatch.DeadLettered: events.Dead,
	dispatch.Canceled: events.Canceled, dispatch.Skipped: events.Skipped,
}
