// Package natsurl checks NATS server URLs as the command lines take them.
package natsurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Check accepts what nats.Connect accepts: a nats, tls, ws or wss URL
// with a host, the scheme optional (nats:// then).
func Check(s string) error {
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("scheme %q: want nats://, tls://, ws:// or wss://", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("no host: want a URL such as nats://127.0.0.1:4222")
	}
	if p := u.Port(); p != "" {
		if _, err := net.LookupPort("tcp", p); err != nil {
			return fmt.Errorf("port %q: want a number from 1 to 65535", p)
		}
	}
	return nil
}
