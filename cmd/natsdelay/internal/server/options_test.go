package server

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/delaystore/raftstore"
)

// Each bad option is refused by Validate, and by Open before it starts
// anything, with an error that names the option and matches ErrSettings;
// good options pass.
func TestOptions_Validate_BadOptionsNamed(t *testing.T) {
	good := func() Options {
		return Options{Engine: "pebble", DataDir: t.TempDir(), NATSListen: "127.0.0.1:0"}
	}
	connect := func(...nats.Option) (*nats.Conn, error) { return nil, errors.New("not called") }
	for _, tc := range []struct {
		name string
		mod  func(*Options)
		want string // "" for good options
	}{
		{"pebble on a data dir, embedded", func(*Options) {}, ""},
		{"memory without a data dir, connected", func(o *Options) {
			o.Engine, o.DataDir, o.NATSListen, o.Connect = "memory", "", "", connect
		}, ""},
		{"unknown engine", func(o *Options) { o.Engine = "rocks" }, `Engine "rocks": want one of pebble, bolt, memory`},
		{"no data dir", func(o *Options) { o.DataDir = "" }, "no DataDir: the pebble engine keeps its messages there"},
		{"no NATS", func(o *Options) { o.NATSListen = "" }, "no NATS server: set Connect, or NATSListen"},
		{"JetStream beside Connect", func(o *Options) { o.Connect, o.JetStreamDir = connect, "js" }, "NATSCluster and JetStreamDir configure the embedded nats-server"},
		{"routes beside Connect", func(o *Options) { o.Connect, o.NATSCluster.Routes = connect, []string{"nats://x:6222"} }, "which Connect replaces"},
		{"UI without HTTP", func(o *Options) { o.UI = true }, "UI and PProf are served on the HTTP listener: set HTTP"},
		{"PProf without HTTP", func(o *Options) { o.PProf = true }, "UI and PProf are served on the HTTP listener"},
		{"cluster's dir given", func(o *Options) { o.Cluster = &raftstore.Config{Dir: "raft"} }, "Cluster.Dir and Logger are set by Open"},
		{"service's logger given", func(o *Options) { o.Service.Logger = slog.New(slog.DiscardHandler) }, "Service.Logger is set by Open"},
		{"bad service setting", func(o *Options) { o.Service.IngestPrefix = "delay.>" }, "Service: invalid config: IngestPrefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good()
			tc.mod(&o)
			err := o.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrSettings) {
				t.Fatalf("Validate: %v, want an ErrSettings saying %q", err, tc.want)
			}
			srv, err := Open(t.Context(), o)
			if srv != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, %v, want the same error", srv, err)
			}
		})
	}
}
