package engine_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/engine"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/delaystore/storetest"
)

func open(t *testing.T, cfg engine.Config) delaystore.Store {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	s, err := engine.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Every engine name opens a store that keeps the contract.
func TestOpen_EachEngine_KeepsContract(t *testing.T) {
	for _, name := range engine.Names() {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) delaystore.Store {
				return open(t, engine.Config{Engine: name, Dir: t.TempDir()})
			})
		})
	}
}

// The disk engines keep their data where the package doc says, and find it
// again after a reopen; the default engine is Pebble.
func TestOpen_DiskEngines_LayoutAndReopen(t *testing.T) {
	cases := []struct {
		engine, want string
	}{
		{"", engine.PebbleDir},
		{engine.Pebble, engine.PebbleDir},
		{engine.Bolt, engine.BoltFile},
	}
	for _, c := range cases {
		t.Run("engine="+c.engine, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data") // Open creates it
			cfg := engine.Config{Engine: c.engine, Dir: dir}
			s := open(t, cfg)
			b := s.NewBatch()
			_ = b.Set([]byte("k"), []byte("v"))
			if err := b.Commit(delaystore.Sync); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, c.want)); err != nil {
				t.Fatalf("store not at %s: %v", c.want, err)
			}
			if v, err := open(t, cfg).Get([]byte("k")); err != nil || string(v) != "v" {
				t.Fatalf("after reopen Get = %q, %v; want v", v, err)
			}
		})
	}
}

// A data directory that holds one engine's store is refused by the other,
// which would otherwise start empty beside it.
func TestOpen_OtherEnginesDir_Refused(t *testing.T) {
	for _, c := range []struct{ first, second string }{
		{engine.Pebble, engine.Bolt},
		{engine.Bolt, engine.Pebble},
	} {
		t.Run(c.first+"_then_"+c.second, func(t *testing.T) {
			dir := t.TempDir()
			if err := open(t, engine.Config{Engine: c.first, Dir: dir}).Close(); err != nil {
				t.Fatal(err)
			}
			s, err := engine.Open(engine.Config{Engine: c.second, Dir: dir})
			if err == nil {
				s.Close()
				t.Fatalf("%s opened a directory holding a %s store", c.second, c.first)
			}
			if !errors.Is(err, delaystore.ErrInvalidConfig) || !strings.Contains(err.Error(), "a "+c.first+" store") {
				t.Fatalf("Open = %v; want ErrInvalidConfig naming the %s store", err, c.first)
			}
		})
	}
}

// A bad Config is an ErrInvalidConfig that names each bad value and what is
// accepted, and Open returns a nil Store for it.
func TestOpen_InvalidConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  engine.Config
		want []string
	}{
		{"unknown engine", engine.Config{Engine: "rocksdb", Dir: "d"},
			[]string{`Engine ("rocksdb")`, "pebble, bolt, memory"}},
		{"engine names are exact", engine.Config{Engine: "Pebble", Dir: "d"}, []string{`Engine ("Pebble")`}},
		{"pebble without dir", engine.Config{Engine: engine.Pebble}, []string{`Dir ("")`, `"pebble"`}},
		{"default engine without dir", engine.Config{}, []string{`Dir ("")`, `"pebble"`}},
		{"bolt without dir", engine.Config{Engine: engine.Bolt}, []string{`Dir ("")`, `"bolt"`}},
		{"pebble sizes", engine.Config{Dir: "d", Pebble: pebblestore.Config{BlockCacheSize: -1, MemTableSize: 4 << 30}},
			[]string{"BlockCacheSize (-1)", "MemTableSize (4294967296)"}},
		{"bolt tuning", engine.Config{Engine: engine.Bolt, Dir: "d", Bolt: boltstore.Config{Timeout: -1, InitialMmapSize: -1}},
			[]string{"Timeout (-1ns)", "InitialMmapSize (-1)"}},
		{"every bad field at once", engine.Config{Engine: engine.Bolt, Bolt: boltstore.Config{Timeout: -1}},
			[]string{`Dir ("")`, "Timeout (-1ns)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := engine.Open(c.cfg)
			if !errors.Is(err, delaystore.ErrInvalidConfig) {
				t.Fatalf("Open = %v, want ErrInvalidConfig", err)
			}
			if s != nil {
				t.Errorf("Open returned a non-nil Store with its error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestConfig_Validate_ValidConfigs(t *testing.T) {
	d := engine.DefaultConfig()
	d.Dir = "d"
	for name, cfg := range map[string]engine.Config{
		"defaults":                  d,
		"memory without dir":        {Engine: engine.Memory},
		"other engine's tuning ok":  {Engine: engine.Memory, Bolt: boltstore.Config{Timeout: -1}},
		"bolt ignores pebble sizes": {Engine: engine.Bolt, Dir: "d", Pebble: pebblestore.Config{MemTableSize: -1}},
	} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: Validate = %v, want nil", name, err)
		}
	}
}
