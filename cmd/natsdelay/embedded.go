package main

import (
	"net"
	"strconv"

	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// defaultListen is where the embedded server listens unless --nats-listen
// moves it: loopback only, since it has no auth.
const defaultListen = "127.0.0.1:4222"

// checkListen adds a problem to p if addr is not a host:port for
// --nats-listen.
func checkListen(p *problems, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add("--nats-listen %q: want host:port, such as %s: %v", addr, defaultListen, err)
		return
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		p.add("--nats-listen %q: port %q: want a number from 0 (any free port) to 65535", addr, port)
		return
	}
}

// probeListen adds a problem to p if the port of addr, a valid
// --nats-listen, is taken now, so a port in use is a clear usage error
// rather than a nats-server failure. The port may be taken between
// this probe and the server's listen; startEmbedded reports that case
// with the same hint.
func probeListen(p *problems, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" {
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		p.add("%w", server.ListenError(addr, err))
		return
	}
	_ = ln.Close()
}
