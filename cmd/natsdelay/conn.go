package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/natsdelay/natsdelay/cmd/internal/natsurl"
	"github.com/natsdelay/natsdelay/cmd/internal/usage"

	"github.com/nats-io/nats.go"
)

// defaultClientURL is where pub and sub connect by default: the embedded
// server of a natsdelay serve started with no flags.
const defaultClientURL = nats.DefaultURL

// connFlags are the flags that say how to reach NATS. serve and the client
// commands share them; only the default and help of --nats differ, through
// the nats_url and nats_help vars of each command.
type connFlags struct {
	NATS     string `name:"nats" help:"${nats_help}" default:"${nats_url}" placeholder:"URL"`
	Creds    string `help:"NATS credentials file (user JWT and NKey seed)." placeholder:"FILE"`
	NKey     string `name:"nkey" help:"NATS NKey seed file." placeholder:"SEED_FILE"`
	Token    string `help:"NATS authentication token."`
	User     string `help:"NATS user name."`
	Password string `help:"NATS password, with --user."`
	TLSCA    string `name:"tls-ca" help:"CA certificate file to verify the NATS server with." placeholder:"FILE"`
	TLSCert  string `name:"tls-cert" help:"TLS client certificate file, with --tls-key." placeholder:"FILE"`
	TLSKey   string `name:"tls-key" help:"TLS client key file, with --tls-cert." placeholder:"FILE"`
}

// authSet names the auth flags that are set, for serve to refuse them when
// it embeds a server that has no auth.
func (c *connFlags) authSet() []string {
	var set []string
	for _, f := range []struct{ name, v string }{
		{"--creds", c.Creds}, {"--nkey", c.NKey}, {"--token", c.Token}, {"--user", c.User},
		{"--password", c.Password}, {"--tls-ca", c.TLSCA}, {"--tls-cert", c.TLSCert}, {"--tls-key", c.TLSKey},
	} {
		if f.v != "" {
			set = append(set, f.name)
		}
	}
	return set
}

// check adds every bad connection setting to p.
func (c *connFlags) check(p *problems) {
	if c.NATS != "" {
		for _, u := range strings.Split(c.NATS, ",") {
			if err := natsurl.Check(strings.TrimSpace(u)); err != nil {
				p.add("--nats %q: %v", c.NATS, err)
			}
		}
	}
	for _, f := range []struct{ name, v string }{
		{"--creds", c.Creds}, {"--nkey", c.NKey}, {"--tls-ca", c.TLSCA}, {"--tls-cert", c.TLSCert}, {"--tls-key", c.TLSKey},
	} {
		if f.v == "" {
			continue
		}
		if fi, err := os.Stat(f.v); err != nil {
			p.add("%s %q: cannot read it: %v", f.name, f.v, err)
		} else if fi.IsDir() {
			p.add("%s %q: is a directory: want a file", f.name, f.v)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		p.add("--tls-cert and --tls-key go together: give both or neither")
	}
	if c.Password != "" && c.User == "" {
		p.add("--password needs --user")
	}
	if c.Token != "" && c.User != "" {
		p.add("--token and --user are two ways to log in: give one")
	}
}

// options returns the nats.go options for these flags, with the
// connection's events logged to log.
func (c *connFlags) options(name string, log *slog.Logger) ([]nats.Option, error) {
	opts := events(name, log)
	auth, err := c.authOptions()
	if err != nil {
		return nil, err
	}
	return append(opts, auth...), nil
}

// events returns the options that name a connection and log its events.
func events(name string, log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.Name(name),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			// Close also calls this; a closing connection is no news.
			if nc.IsClosed() {
				return
			}
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "nats_url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("nats error", "err", err)
		}),
	}
}

// authOptions returns the nats.go options of the auth and TLS flags.
func (c *connFlags) authOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, usage.Errorf("--nkey %q: %v", c.NKey, err)
		}
		opts = append(opts, o)
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}

// connect connects to --nats. It fails at once if no server answers:
// whoever started us hears about a wrong URL instead of waiting on it.
func (c *connFlags) connect(name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.options(name, log)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.NATS, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redact(c.NATS), err)
	}
	return nc, nil
}

// redact hides passwords and tokens in URLs before they are logged.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, s := range parts {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.User == nil {
			continue
		}
		// A user with no password is a token: hide it too.
		if _, ok := u.User.Password(); !ok {
			u.User = url.User("redacted")
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}
