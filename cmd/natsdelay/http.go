package main

import (
	"errors"
	"net"
	"strconv"
	"syscall"

	"github.com/natsdelay/natsdelay/cmd/internal/usage"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/console"
)

// defaultHTTP is where serve's HTTP listener binds unless --http moves it:
// loopback only, since the endpoints have no auth.
const defaultHTTP = "127.0.0.1:7070"

// checkHTTP adds a problem to p if addr is not a host:port for --http.
func checkHTTP(p *problems, addr string) {
	if addr == "" {
		return // off
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add("--http %q: want host:port, such as %s, or \"\" to turn it off: %v", addr, defaultHTTP, err)
		return
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		p.add("--http %q: port %q: want a number from 0 (any free port) to 65535", addr, port)
		return
	}
}

// probeHTTP adds a problem to p if the port of addr, a valid --http, is
// taken now. Serve probes when it starts, not when it parses its
// settings, which depend on nothing else running; and the port may still
// be taken between this probe and the listen: startHTTP reports that case
// the same way.
func probeHTTP(p *problems, addr string) {
	if addr == "" {
		return
	}
	if _, port, _ := net.SplitHostPort(addr); port == "0" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		p.add("--http %s: the port is already in use: choose another with --http HOST:PORT, or turn the listener off with --http \"\"", addr)
		return
	}
	if err == nil {
		_ = ln.Close()
	}
}

// checkUI adds a problem to p for each --ui-auth that cannot apply: with
// the console or the listener off, or a password file that does not read.
func (c *serveCmd) checkUI(p *problems) {
	if c.UIAuth == "" {
		return
	}
	switch {
	case c.HTTP == "":
		p.add(`--ui-auth: the console serves on the HTTP listener, which --http "" turns off`)
	case !c.UI:
		p.add(`--ui-auth: the console is off (--ui=false)`)
	default:
		if _, err := console.LoadUsers(c.UIAuth); err != nil {
			for _, e := range leaves(err) {
				p.add("--ui-auth %s: %v", c.UIAuth, e)
			}
		}
	}
}

// uiUsers reads the --ui-auth password file, nil without one.
func (c *serveCmd) uiUsers() (*console.Users, error) {
	if c.UIAuth == "" || !c.UI || c.HTTP == "" {
		return nil, nil
	}
	u, err := console.LoadUsers(c.UIAuth)
	if err != nil {
		return nil, usage.Errorf("--ui-auth %s: %w", c.UIAuth, err)
	}
	return u, nil
}
