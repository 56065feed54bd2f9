package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"

	"github.com/nats-io/nats.go"
)

// apiFlags are the flags of the admin commands, which use only the
// request/reply API on <api-prefix>.<VERB>, as any client would.
type apiFlags struct {
	clientFlags `embed:""`

	APIPrefix string        `name:"api-prefix" help:"API prefix of the service." default:"${api_prefix}"`
	Timeout   time.Duration `help:"How long to wait for the reply." default:"5s" env:"-"`
	JSON      bool          `name:"json" help:"Print the service's JSON reply instead of a table." env:"-"`
}

func (c *apiFlags) checkAPI(p *problems) {
	c.checkClient(p)
	if c.Timeout <= 0 {
		p.add("--timeout %v: want a duration > 0, such as 5s", c.Timeout)
	}
	if c.APIPrefix == "" {
		p.add(`--api-prefix "": want the service's prefix, such as %s`, wire.DefaultAPIPrefix)
	}
}

// apiClient is one connection to the API, through the client package,
// with the command line's words for a service that does not answer.
type apiClient struct {
	nc      *nats.Conn
	api     *client.Client
	prefix  string
	timeout time.Duration
}

// newAPIClient is the API client of the command line on nc.
func newAPIClient(nc *nats.Conn, prefix string, timeout time.Duration) (*apiClient, error) {
	api, err := client.New(nc, client.WithAPIPrefix(prefix), client.WithTimeout(timeout))
	if err != nil {
		return nil, err
	}
	return &apiClient{nc: nc, prefix: prefix, timeout: timeout, api: api}, nil
}

// dial connects for the command name.
func (c *apiFlags) dial(name string, e *env) (*apiClient, error) {
	nc, err := c.connect("natsdelay "+name, e.log)
	if err != nil {
		return nil, err
	}
	cl, err := newAPIClient(nc, c.APIPrefix, c.Timeout)
	if err != nil {
		nc.Close()
	}
	return cl, err
}

func (cl *apiClient) close() { cl.nc.Close() }

// ask dials for the command name and sends req to verb. With --json it
// prints the reply body as it came and returns printed; otherwise it
// returns the body for the command to print.
func (c *apiFlags) ask(e *env, name, verb string, req any) (data []byte, printed bool, err error) {
	cl, err := c.dial(name, e)
	if err != nil {
		return nil, false, err
	}
	defer cl.close()
	data, err = cl.call(verb, req)
	if err != nil || !c.JSON {
		return data, false, err
	}
	return nil, true, printJSON(e.stdout, data)
}

// askFor is ask with the reply decoded into an R.
func askFor[R any](c *apiFlags, e *env, name, verb string, req any) (r R, printed bool, err error) {
	data, printed, err := c.ask(e, name, verb, req)
	if err != nil || printed {
		return r, printed, err
	}
	return r, false, decodeReply(verb, data, &r)
}

// call sends req as JSON to <prefix>.<verb> and returns the reply body, or
// the error the service answered with, printed as "<code> <description>".
func (cl *apiClient) call(verb string, req any) ([]byte, error) {
	data, err := cl.api.Request(context.Background(), verb, req)
	return data, cl.explain(verb, err)
}

// explain adds to err, when nothing answered, where the command looked.
func (cl *apiClient) explain(verb string, err error) error {
	subj := cl.prefix + "." + verb
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("nothing answers on %s: is natsdelay serve running there, with --api-prefix %s?", subj, cl.prefix)
	case errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("no answer on %s within %v", subj, cl.timeout)
	}
	return err
}

// replyError returns the error that m carries in the NATS micro
// convention, or nil; every command that talks to the service uses it, so
// they all print an error answer as "<code> <description>". The JSON body has
// the code as a number and is preferred; the headers are the micro
// convention that every error reply has.
func replyError(m *nats.Msg) error {
	return wire.ParseError(m.Header, m.Data)
}

// decodeReply decodes a reply body into v, blaming the verb if it does not fit.
func decodeReply(verb string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("unexpected %s reply %q: %w", verb, data, err)
	}
	return nil
}

// printJSON writes a reply body as it came, on one line.
func printJSON(w io.Writer, data []byte) error {
	_, err := fmt.Fprintf(w, "%s\n", bytes.TrimSpace(data))
	return err
}
