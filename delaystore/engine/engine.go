// Package engine opens the storage engine a configuration names, so that
// the code that starts the service names no engine package itself.
//
// # Layout
//
// Each disk engine keeps its files in its own place under Config.Dir:
//
//	Dir/pebble/         the Pebble database directory
//	Dir/natsdelay.db    the bbolt database file
//
// Open refuses a Dir that holds the other engine's store, because opening
// it would start empty and leave the messages stored there undelivered.
package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
)

// Engine names accepted in Config.Engine.
const (
	// Pebble is the LSM engine on disk, and the default.
	Pebble = "pebble"
	// Bolt is the bbolt B+tree engine, in one file.
	Bolt = "bolt"
	// Memory is Pebble in memory: nothing survives Close. For tests and
	// trials.
	Memory = "memory"
)

// Names returns the accepted engine names, the default first.
func Names() []string { return []string{Pebble, Bolt, Memory} }

const (
	// PebbleDir is the directory under Config.Dir that holds a Pebble store.
	PebbleDir = "pebble"
	// BoltFile is the file under Config.Dir that holds a bbolt store.
	BoltFile = "natsdelay.db"
)

// Config configures Open. A zero field means the default shown by
// DefaultConfig. Fields for an engine other than the one chosen are
// ignored.
type Config struct {
	// Engine is one of Pebble (the default), Bolt or Memory.
	Engine string

	// Dir is the data directory, created if needed. Required for the disk
	// engines; ignored by Memory. See the package doc for the layout. Both
	// disk engines create their directories mode 0700 and files mode 0600,
	// private to the user the service runs as.
	Dir string

	// Pebble tunes the Pebble engine (Pebble and Memory): see
	// pebblestore.Config. Its Dir and InMemory are set by Open from Dir and
	// Engine, and a nil Logger is Logger.
	Pebble pebblestore.Config
	// Bolt tunes the bbolt engine: see boltstore.Config. Its Path is set by
	// Open from Dir, and a nil Logger is Logger.
	Bolt boltstore.Config
	// Logger receives the engine's logs. Nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults that Open uses for zero fields,
// the engines' included. Dir is left empty: it has no sensible default.
func DefaultConfig() Config {
	return Config{Engine: Pebble, Pebble: pebblestore.DefaultConfig(), Bolt: boltstore.DefaultConfig()}
}

// Validate reports every invalid field at once, in an error that wraps
// delaystore.ErrInvalidConfig. Of the engines' configs it checks the
// chosen engine's only, through that engine's own Validate.
func (c Config) Validate() error {
	var errs []error
	name := c.engine()
	switch name {
	case Pebble, Bolt:
		if c.Dir == "" {
			errs = append(errs, fmt.Errorf(`engine: %w: Dir ("") must name a data directory for engine %q`, delaystore.ErrInvalidConfig, name))
		}
	case Memory:
	default:
		errs = append(errs, fmt.Errorf("engine: %w: Engine (%q) must be one of %s", delaystore.ErrInvalidConfig, c.Engine, strings.Join(Names(), ", ")))
	}
	// A missing Dir is reported once, above, not again as the
	// engine's path.
	dir := cmp.Or(c.Dir, ".")
	switch name {
	case Pebble, Memory:
		errs = append(errs, c.pebble(name, dir).Validate())
	case Bolt:
		errs = append(errs, c.bolt(dir).Validate())
	}
	return errors.Join(errs...)
}

// pebble is the Pebble engine's config for engine name in dir.
func (c Config) pebble(name, dir string) pebblestore.Config {
	pc := c.Pebble
	pc.Logger = cmp.Or(pc.Logger, c.Logger)
	if name == Memory {
		pc.InMemory, pc.Dir = true, ""
	} else {
		pc.InMemory, pc.Dir = false, filepath.Join(dir, PebbleDir)
	}
	return pc
}

// bolt is the bbolt engine's config in dir.
func (c Config) bolt(dir string) boltstore.Config {
	bc := c.Bolt
	bc.Logger = cmp.Or(bc.Logger, c.Logger)
	bc.Path = filepath.Join(dir, BoltFile)
	return bc
}

// engine is the chosen engine's name, with the default applied.
func (c Config) engine() string {
	if c.Engine == "" {
		return Pebble
	}
	return c.Engine
}

// Open opens the engine cfg names. It returns an error wrapping
// delaystore.ErrInvalidConfig for a bad cfg, or when Dir holds the other
// disk engine's store, and the engine's error if it cannot open. On error
// the Store is nil. The caller must Close the Store.
func Open(cfg Config) (delaystore.Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name := cfg.engine()
	if name != Memory {
		if err := checkDir(name, cfg.Dir); err != nil {
			return nil, err
		}
	}
	switch name {
	case Pebble, Memory:
		s, err := pebblestore.Open(cfg.pebble(name, cfg.Dir))
		if err != nil {
			return nil, fmt.Errorf("engine: %s: %w", name, err)
		}
		return s, nil
	default:
		// bbolt creates its file, not the directory it is in.
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("engine: bolt: %w", err)
		}
		s, err := boltstore.Open(cfg.bolt(cfg.Dir))
		if err != nil {
			return nil, fmt.Errorf("engine: bolt: %w", err)
		}
		return s, nil
	}
}

// checkDir refuses a Dir that already holds a store of a disk engine other
// than name.
func checkDir(name, dir string) error {
	var found []string
	for other, path := range map[string]string{Pebble: PebbleDir, Bolt: BoltFile} {
		if other == name {
			continue
		}
		_, err := os.Stat(filepath.Join(dir, path))
		switch {
		case err == nil:
			found = append(found, fmt.Sprintf("a %s store (%s)", other, path))
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("engine: %s: check %s: %w", name, dir, err)
		}
	}
	if len(found) == 0 {
		return nil
	}
	slices.Sort(found)
	return fmt.Errorf("engine: %w: Engine (%q): Dir (%q) already holds %s; opening %s there would start empty and strand its messages",
		delaystore.ErrInvalidConfig, name, dir, strings.Join(found, " and "), name)
}
