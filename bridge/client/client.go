package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Client talks to one natsdelay service (or cluster) over a connection it
// does not own. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	api     string
	ingest  string
	timeout time.Duration
	retries int
	backoff time.Duration
}

// Option sets up a Client; an error refuses the setting.
type Option func(*Client) error

// WithAPIPrefix is the service's --api-prefix (default $DELAY.API).
func WithAPIPrefix(prefix string) Option {
	return func(c *Client) error { c.api = prefix; return nil }
}

// WithIngestPrefix is the service's --ingest-prefix (default delay).
func WithIngestPrefix(prefix string) Option {
	return func(c *Client) error { c.ingest = prefix; return nil }
}

// WithTimeout bounds each request's wait for its answer (default 5s),
// within the context's own deadline. It must be more than 0: a request
// that may not wait at all could never be answered.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("client: the timeout must be more than 0, not %v", d)
		}
		c.timeout = d
		return nil
	}
}

// WithRetry sends a request that failed in a way that may pass up to
// attempts times in all, waiting about backoff after the first failure
// and twice as long after each next one, up to MaxRetryWait (or backoff,
// if it is longer); each wait is drawn between half of that and all of
// it, so that clients that failed together do not all retry together
// (see the package doc for what is retried).
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(c *Client) error {
		if backoff < 0 {
			return fmt.Errorf("client: the retry backoff must not be negative, not %v", backoff)
		}
		c.retries, c.backoff = max(attempts, 1)-1, backoff
		return nil
	}
}

// DefaultTimeout is how long a request waits for its answer by default.
const DefaultTimeout = 5 * time.Second

// MaxRetryWait caps the doubling of WithRetry's wait between tries.
const MaxRetryWait = 10 * time.Second

// New returns a client of the service on nc, or the error of an option
// that refused its setting.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	c := &Client{nc: nc, api: wire.DefaultAPIPrefix, ingest: wire.DefaultIngestPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// IsRetryable reports whether err may pass if the request is sent again:
// nothing answered (no service there, or a cluster between leaders), no
// answer in time, or the service answered 503 (shutting down, its store
// failing, not the leader any more).
func IsRetryable(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, wire.ErrUnavailable)
}

// unreceived reports whether err says that nothing received the request:
// no responders. Unlike after a timeout or a 503, sending it again cannot
// apply it twice.
func unreceived(err error) bool { return errors.Is(err, nats.ErrNoResponders) }

// Request sends req as JSON to <api prefix>.<verb> and returns the body of
// the answer, or the error: a *wire.ServiceError for an error answer, and
// for no answer an error that wraps nats.ErrNoResponders or
// nats.ErrTimeout and names the subject. A nil req sends an empty body.
// It is the call every method makes, for programs (such as a CLI that
// prints the JSON as it came) that want the body itself.
func (c *Client) Request(ctx context.Context, verb string, req any) ([]byte, error) {
	var body []byte
	if req != nil {
		var err error
		if body, err = json.Marshal(req); err != nil {
			return nil, fmt.Errorf("encode the %s request: %w", verb, err)
		}
	}
	m := nats.NewMsg(c.api + "." + verb)
	m.Data = body
	return c.retry(ctx, IsRetryable, func() ([]byte, error) { return c.roundTrip(ctx, m) })
}

// requestOnce is Request for a verb whose second application would be
// told apart from the first (a 404 for what the first deleted): it is
// sent again only after no responders, which nothing received.
func (c *Client) requestOnce(ctx context.Context, verb string, req any) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode the %s request: %w", verb, err)
	}
	m := nats.NewMsg(c.api + "." + verb)
	m.Data = body
	return c.retry(ctx, unreceived, func() ([]byte, error) { return c.roundTrip(ctx, m) })
}

// call is Request, decoding the answer into out.
func (c *Client) call(ctx context.Context, verb string, req, out any) error {
	data, err := c.Request(ctx, verb, req)
	if err != nil {
		return err
	}
	return decode(verb, data, out)
}

func decode(verb string, data []byte, out any) error {
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("unexpected %s answer %q: %w", verb, data, err)
	}
	return nil
}

// roundTrip sends m and waits for its answer within the client's timeout.
func (c *Client) roundTrip(ctx context.Context, m *nats.Msg) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	rep, err := c.nc.RequestMsgWithContext(rctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("nothing answers on %s: %w", m.Subject, nats.ErrNoResponders)
	case err != nil && ctx.Err() == nil && rctx.Err() != nil:
		return nil, fmt.Errorf("no answer on %s within %v: %w", m.Subject, c.timeout, nats.ErrTimeout)
	case err != nil:
		return nil, fmt.Errorf("request on %s: %w", m.Subject, err)
	}
	if err := wire.ParseError(rep.Header, rep.Data); err != nil {
		return nil, err
	}
	return rep.Data, nil
}

// retry runs try, and again while its error is one retryable says may
// pass, up to the client's retries.
func (c *Client) retry(ctx context.Context, retryable func(error) bool, try func() ([]byte, error)) ([]byte, error) {
	for n := 0; ; n++ {
		data, err := try()
		if err == nil || n >= c.retries || !retryable(err) {
			return data, err
		}
		t := time.NewTimer(retryWait(c.backoff, n, rand.Int64N))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// retryWait is the wait after the failure of try n (0 for the first):
// base doubled n times, at most MaxRetryWait (or base, if longer), and
// of that a random part, from half to all of it, drawn with randN (which
// returns a number in [0, its argument)).
func retryWait(base time.Duration, n int, randN func(int64) int64) time.Duration {
	limit := max(base, MaxRetryWait)
	w := base
	// NB: doubled step by step up to the limit, not shifted: base<<n
	// overflows into a negative wait after some 30 tries.
	for ; n > 0 && w < limit; n-- {
		w *= 2
	}
	w = min(w, limit)
	if w < 2 {
		return w
	}
	return w/2 + time.Duration(randN(int64(w-w/2)+1))
}

// Info is the service's INFO: version, counts, stats and settings.
func (c *Client) Info(ctx context.Context) (*wire.InfoReply, error) {
	var r wire.InfoReply
	return &r, c.call(ctx, wire.VerbInfo, nil, &r)
}

// Get is one pending message, by tag or by subject and id; ref.Payload
// asks for its payload too. A message that is not pending is a
// *wire.ServiceError matching wire.ErrNotFound.
func (c *Client) Get(ctx context.Context, ref wire.MessageRef) (*MessageInfo, error) {
	return c.GetUpcoming(ctx, wire.GetRequest{MessageRef: ref})
}

// GetUpcoming is Get with, for an occurrence of a recurring schedule,
// r.Upcoming next times (up to wire.MaxUpcoming) in Schedule.Next.
func (c *Client) GetUpcoming(ctx context.Context, r wire.GetRequest) (*MessageInfo, error) {
	var out wire.MessageInfo
	if err := c.call(ctx, wire.VerbGet, r, &out); err != nil {
		return nil, err
	}
	m, err := messageInfo(out)
	return &m, err
}

// Cancel deletes one pending message, by tag or by subject and id (a
// recurring schedule by its name). One that is not pending is a
// *wire.ServiceError matching wire.ErrNotFound. With WithRetry it is sent
// again only after no responders.
func (c *Client) Cancel(ctx context.Context, ref wire.MessageRef) error {
	_, err := c.requestOnce(ctx, wire.VerbCancel, ref)
	return err
}
