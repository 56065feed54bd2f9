package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// benchFireAt carries the intended fire time in Unix nanoseconds on every
// message of both systems, so lateness is measured the same way for both:
// JetStream copies headers onto the message it fires, natsdelay passes
// them on.
const benchFireAt = "Bench-Fire-At"

// env is what every run shares: the server, client connections and the
// subjects, unique per run so a shared server's other traffic cannot mix in.
type env struct {
	cfg Config
	srv *server.Server // nil with Config.NATSURL
	url string
	dir string
	tmp bool // dir is ours to remove

	// conns carry the load: the pipelined publisher uses conns[0], the
	// requesters share them all.
	conns []*nats.Conn
	js    jetstream.JetStream
	// replicas is the replication of the streams stream creates; 0 is 1.
	replicas int

	id     string // unique per run
	ingest string // natsdelay ingest prefix
	ack    string
	api    string
	events string // natsdelay event prefix
	// withEvents turns natsdelay's lifecycle events on in the services
	// started meanwhile (the events phase).
	withEvents bool
	sched      string // JetStream schedule subjects: <sched>.<phase>.<i>
	fired      string // JetStream target subjects: <fired>.<phase>
	plain      string // natsdelay target subjects: <plain>.<phase>
	payload    []byte
}

// newEnv sets up the server, connections and subjects of one phase. With
// Config.Dir its files go in the phase's own subdirectory.
func newEnv(cfg Config, phase string) (e *env, err error) {
	e = &env{cfg: cfg, id: nuid.Next(), payload: make([]byte, cfg.PayloadSize)}
	e.ingest = "bench_" + e.id
	e.ack = "$BENCH." + e.id + ".ACK"
	e.api = "$BENCH." + e.id + ".API"
	e.events = "$BENCH." + e.id + ".EVENT"
	e.sched = "bench." + e.id + ".sched"
	e.fired = "bench." + e.id + ".fired"
	e.plain = "bench." + e.id + ".plain"
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	if cfg.Dir != "" {
		e.dir = filepath.Join(cfg.Dir, phase)
		if err = os.MkdirAll(e.dir, 0o755); err != nil {
			return e, fmt.Errorf("bench: make %s: %w", e.dir, err)
		}
	} else {
		if e.dir, err = os.MkdirTemp("", "natsdelay-bench-"); err != nil {
			return e, fmt.Errorf("bench: make a temp dir: %w", err)
		}
		e.tmp = true
	}
	e.url = cfg.NATSURL
	if e.url == "" {
		opts := &server.Options{
			ServerName: "natsdelay-bench",
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   filepath.Join(e.dir, "jetstream"),
			SyncAlways: cfg.JSSyncAlways,
			NoSigs:     true,
			NoLog:      true,
		}
		if e.srv, err = server.NewServer(opts); err != nil {
			return e, fmt.Errorf("bench: embedded nats-server: %w", err)
		}
		e.srv.Start()
		if !e.srv.ReadyForConnections(10 * time.Second) {
			return e, errors.New("bench: embedded nats-server not ready after 10s")
		}
		e.url = e.srv.ClientURL()
	}
	// Eight connections, as the Go benchmarks use, so 64 requesters are not
	// all serialised on one socket.
	for i := range 8 {
		nc, err := e.connect("bench-load-" + strconv.Itoa(i))
		if err != nil {
			return e, err
		}
		e.conns = append(e.conns, nc)
	}
	if e.js, err = jetstream.New(e.conns[0]); err != nil {
		return e, fmt.Errorf("bench: jetstream: %w", err)
	}
	return e, nil
}

func (e *env) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(e.url, nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("bench: connect to %s: %w", e.url, err)
	}
	return nc, nil
}

func (e *env) close() error {
	var errs []error
	for _, nc := range e.conns {
		nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
	if e.tmp {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}

// delay is one natsdelay instance on its own data dir and connection.
type delay struct {
	svc *bridge.Service
	nc  *nats.Conn
	dir string
}

// openDelay starts natsdelay over a Pebble store in dir, as serve does.
func (e *env) openDelay(dir string) (*delay, error) {
	nc, err := e.connect("natsdelay-bench-service")
	if err != nil {
		return nil, err
	}
	st, err := pebblestore.Open(pebblestore.Config{Dir: dir, Logger: e.cfg.Logger})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: open the pebble store in %s: %w", dir, err)
	}
	cfg := bridge.Config{Engine: "pebble", IngestPrefix: e.ingest, AckPrefix: e.ack, APIPrefix: e.api, Events: e.withEvents, EventPrefix: e.events}
	cfg.Expiry.Interval, cfg.Logger = e.cfg.ExpiryInterval, e.cfg.Logger
	svc, err := bridge.New(nc, st, cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: start natsdelay: %w", err)
	}
	return &delay{svc: svc, nc: nc, dir: dir}, nil
}

func (d *delay) close() error {
	err := d.svc.Close()
	if ferr := d.nc.FlushTimeout(5 * time.Second); ferr != nil && err == nil {
		err = ferr
	}
	d.nc.Close()
	return err
}

// client is natsdelay's API on the bench's first connection, each
// request waiting at most timeout.
func (e *env) client(timeout time.Duration) *client.Client {
	c, err := client.New(e.conns[0], client.WithAPIPrefix(e.api), client.WithIngestPrefix(e.ingest), client.WithTimeout(timeout))
	if err != nil {
		// NB: the timeouts are constants or the checked Config.Timeout,
		// all more than 0: an error here is a bug of the bench.
		panic(err)
	}
	return c
}

// stream creates a stream that allows schedules for one phase. The
// schedules and their targets are both in it: the server refuses a target
// outside the stream's subjects and stores the fired message in the stream.
func (e *env) stream(ctx context.Context, phase string) (jetstream.Stream, error) {
	s, err := e.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:              "BENCH_" + e.id + "_" + phase,
		Subjects:          []string{e.sched + "." + phase + ".>", e.fired + "." + phase},
		Storage:           jetstream.FileStorage,
		AllowMsgSchedules: true,
		Replicas:          max(e.replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("bench: create the %s stream: %w", phase, err)
	}
	return s, nil
}

func (e *env) deleteStream(ctx context.Context, s jetstream.Stream) error {
	if err := e.js.DeleteStream(ctx, s.CachedInfo().Config.Name); err != nil {
		return fmt.Errorf("bench: delete stream: %w", err)
	}
	return nil
}

// delayMsg schedules payload for subj at the time at; a zero at means in
// an hour, for ingest runs whose messages must not fire.
func (e *env) delayMsg(subj string, at time.Time) *nats.Msg {
	h := nats.Header{}
	if at.IsZero() {
		h.Set(wire.HeaderDelay, "1h")
	} else {
		h.Set(wire.HeaderAt, at.UTC().Format(time.RFC3339Nano))
		h.Set(benchFireAt, strconv.FormatInt(at.UnixNano(), 10))
	}
	return &nats.Msg{Subject: e.ingest + "." + subj, Header: h, Data: e.payload}
}

// jsMsg schedules payload for the target of phase at the time at, on a
// schedule subject of its own: the server keeps one schedule per subject
// (it adds a subject rollup), so a shared subject would replace them.
func (e *env) jsMsg(phase string, i int, at time.Time) *nats.Msg {
	if at.IsZero() {
		at = time.Now().Add(time.Hour)
	}
	h := nats.Header{}
	// The layout is RFC 3339 with fractions; the server parses it with
	// time.RFC3339, which accepts fractional seconds.
	h.Set(jetstream.ScheduleHeader, "@at "+at.UTC().Format(time.RFC3339Nano))
	h.Set(jetstream.ScheduleTargetHeader, e.fired+"."+phase)
	h.Set(benchFireAt, strconv.FormatInt(at.UnixNano(), 10))
	return &nats.Msg{Subject: e.sched + "." + phase + "." + strconv.Itoa(i), Header: h, Data: e.payload}
}
