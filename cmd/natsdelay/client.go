package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/natsdelay/natsdelay/cmd/internal/natsurl"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
)

// envNATSURL is the environment variable that the nats CLI and the NATS
// client libraries read the server URL from.
const envNATSURL = "NATS_URL"

// clientFlags are the connection flags of the commands that talk to a
// running service: pub, sub and the admin commands. They read NATS_URL and
// the nats CLI's contexts as the nats CLI does. Each setting comes from,
// first to last: its flag (or NATSDELAY_ variable or config file key),
// NATS_URL for the URL, the context, and the default nats://127.0.0.1:4222.
type clientFlags struct {
	connFlags `embed:""`

	Context string `name:"context" help:"nats CLI context to connect with, as nats context ls lists them; default the selected one." placeholder:"NAME" env:"NATS_CONTEXT"`

	// nctx holds the settings in effect, set by checkClient.
	nctx *natscontext.Context
	// urlFrom says where the URL came from, for error messages.
	urlFrom string
}

// checkClient adds every bad connection setting to p and loads the
// context, so that a missing or broken context is a usage error too.
func (c *clientFlags) checkClient(p *problems) {
	c.connFlags.check(p)
	url, from := c.NATS, "--nats"
	if url == "" {
		if u := strings.TrimSpace(os.Getenv(envNATSURL)); u != "" {
			url, from = u, envNATSURL
			for _, one := range strings.Split(u, ",") {
				if err := natsurl.Check(strings.TrimSpace(one)); err != nil {
					p.add("%s %q: %v", envNATSURL, redact(u), err)
				}
			}
		}
	}
	var opts []natscontext.Option
	for _, o := range []struct {
		v    string
		with func(string) natscontext.Option
	}{
		{url, natscontext.WithServerURL}, {c.Creds, natscontext.WithCreds}, {c.NKey, natscontext.WithNKey},
		{c.Token, natscontext.WithToken}, {c.User, natscontext.WithUser}, {c.Password, natscontext.WithPassword},
		{c.TLSCA, natscontext.WithCA}, {c.TLSCert, natscontext.WithCertificate}, {c.TLSKey, natscontext.WithKey},
	} {
		if o.v != "" {
			opts = append(opts, o.with(o.v))
		}
	}
	// With no name, New loads the context that nats context select
	// chose, or none when there is none.
	nctx, err := natscontext.New(c.Context, true, opts...)
	switch {
	case err != nil && c.Context != "":
		p.add("--context %q: %v; nats context ls lists the contexts", c.Context, err)
		return
	case err != nil:
		p.add("the selected nats context %q: %v; choose another with --context or nats context select", natscontext.SelectedContext(), err)
		return
	}
	switch {
	case url != "":
	case nctx.Name != "" && nctx.ServerURL() != "":
		from = "nats context " + nctx.Name
	default:
		from = "the default"
	}
	c.nctx, c.urlFrom = nctx, from
}

// connect connects to the server the settings name. It fails at once if
// no server answers.
func (c *clientFlags) connect(name string, log *slog.Logger) (*nats.Conn, error) {
	if c.nctx == nil {
		var p problems
		if c.checkClient(&p); p.err() != nil {
			return nil, usage.Wrap(p.err())
		}
	}
	opts, err := c.nctx.NATSOptions(events(name, log)...)
	if err != nil {
		return nil, usage.Errorf("nats context %s: %w", c.nctx.Name, err)
	}
	url := c.nctx.ServerURL()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s (from %s): %w", redact(url), c.urlFrom, err)
	}
	return nc, nil
}

// checkSubject adds a problem to p if subj, given as what, is not a NATS
// subject: empty, an empty token, white space or a control character. A
// wildcard (* for one token, > for the rest) is allowed only as a filter;
// a subject to deliver to or look up must be concrete. The service checks
// too; checking here says what is wrong instead of "nothing answers".
func checkSubject(p *problems, what, subj string, filter bool) {
	want := "want a subject such as orders.reminder"
	if filter {
		want = "want a subject such as orders.reminder, or a filter such as orders.* or orders.>"
	}
	if subj == "" {
		p.add("%s is empty: %s", what, want)
		return
	}
	if strings.ContainsFunc(subj, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		p.add("%s %q contains white space or a control character: %s", what, subj, want)
		return
	}
	toks := strings.Split(subj, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			p.add("%s %q has an empty token: %s", what, subj, want)
			return
		case !strings.ContainsAny(tok, "*>"):
		case !filter:
			p.add("%s %q has a wildcard: %s", what, subj, want)
			return
		case tok == "*", tok == ">" && i == len(toks)-1:
		default:
			p.add("%s %q: a wildcard is a whole token, * for one and > for the rest at the end: %s", what, subj, want)
			return
		}
	}
}
