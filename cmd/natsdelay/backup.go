package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/backup"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/engine"
)

// backupCmd writes a backup of the running service to a file.
type backupCmd struct {
	apiFlags `embed:""`

	File      string `arg:"" help:"File to write the backup to; written whole or not at all." type:"path"`
	ChunkSize int    `name:"chunk-size" help:"Bytes per message of the stream; 0 lets the service choose (512 KiB, within the server's max_payload)." env:"-"`
}

func (c *backupCmd) check() error {
	var p problems
	c.checkAPI(&p)
	if fi, err := os.Stat(filepath.Dir(c.File)); err != nil || !fi.IsDir() {
		p.add("backup %q: want a file in an existing directory", c.File)
	}
	if fi, err := os.Stat(c.File); err == nil && fi.IsDir() {
		p.add("backup %q: is a directory: want a file", c.File)
	}
	if c.ChunkSize != 0 && c.ChunkSize < wire.MinBackupChunk {
		p.add("--chunk-size %d: want 0 or at least %d", c.ChunkSize, wire.MinBackupChunk)
	}
	return p.err()
}

func (c *backupCmd) Run(e *env) error {
	cl, err := c.dial("backup", e)
	if err != nil {
		return err
	}
	defer cl.close()
	// An interrupt stops the stream; the file is then not written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	got, err := backup.Fetch(ctx, cl.nc, c.File, backup.FetchConfig{
		Subject: c.APIPrefix + "." + wire.VerbBackup, ChunkSize: c.ChunkSize, Wait: c.Timeout,
	})
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return cl.explain(wire.VerbBackup, nats.ErrNoResponders)
	case err != nil:
		return fmt.Errorf("backup not written: %w", err)
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d keys, %d bytes\n", c.File, got.Records, got.Bytes)
	return nil
}

// restoreCmd writes a backup into an empty data directory.
type restoreCmd struct {
	File    string `arg:"" help:"Backup file written by natsdelay backup." type:"existingfile"`
	DataDir string `help:"Data directory to restore into: absent or empty." required:""`
	Engine  string `help:"Storage engine of the restored store: pebble or bolt." enum:"pebble,bolt" default:"pebble"`
}

func (c *restoreCmd) Run(e *env) error {
	n, err := backup.Restore(c.File, engine.Config{Engine: c.Engine, Dir: c.DataDir, Logger: e.log})
	if err != nil {
		return fmt.Errorf("nothing restored: %w", err)
	}
	fmt.Fprintf(e.stdout, "restored %d keys into %s (%s); natsdelay serve --data-dir %s --engine %s delivers them\n",
		n, c.DataDir, c.Engine, c.DataDir, c.Engine)
	return nil
}
