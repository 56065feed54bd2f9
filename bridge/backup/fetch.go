package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/snapshot"
)

// FetchConfig configures Fetch.
type FetchConfig struct {
	// Subject is the service's backup subject: <api prefix>.BACKUP.
	Subject string
	// ChunkSize is asked of the service; 0 lets it choose.
	ChunkSize int
	// Wait is how long Fetch waits for each message of the stream.
	Wait time.Duration
}

// Fetched is what Fetch wrote.
type Fetched struct {
	// Bytes is the file's size, Records the keys it holds, Messages the
	// messages the stream took.
	Bytes    int64
	Records  uint64
	Messages uint64
}

// Fetch asks the service on nc for a backup and writes it to path,
// replacing a file there, only once the stream ended and the file read
// back whole (its count and checksum): on any error no file is left at
// path, or beside it, and a file that was there is unchanged. The
// requests are sent on nc; it blocks until the stream ends or fails, each
// message waited for at most cfg.Wait, and ctx ends it early.
func Fetch(ctx context.Context, nc *nats.Conn, path string, cfg FetchConfig) (Fetched, error) {
	if cfg.Subject == "" || cfg.Wait <= 0 {
		return Fetched{}, fmt.Errorf("%w: Subject (%q) must be set and Wait (%v) > 0", ErrInvalidConfig, cfg.Subject, cfg.Wait)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return Fetched{}, fmt.Errorf("backup: create the file: %w", err)
	}
	res, err := fetchInto(ctx, nc, tmp, cfg)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = checkFile(tmp.Name(), res.Records)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return Fetched{}, errors.Join(err, removeMissing(tmp.Name()))
	}
	return res, syncDir(filepath.Dir(path))
}

// fetchInto asks for the stream and writes its chunks to w.
func fetchInto(ctx context.Context, nc *nats.Conn, w io.Writer, cfg FetchConfig) (Fetched, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return Fetched{}, fmt.Errorf("backup: subscribe: %w", err)
	}
	defer sub.Unsubscribe()
	body, _ := json.Marshal(wire.BackupRequest{ChunkSize: cfg.ChunkSize})
	if err := nc.PublishMsg(&nats.Msg{Subject: cfg.Subject, Reply: inbox, Data: body}); err != nil {
		return Fetched{}, fmt.Errorf("backup: ask on %s: %w", cfg.Subject, err)
	}
	r := receiver{w: w}
	for {
		m, err := r.next(ctx, sub, cfg)
		if err != nil {
			return r.res, err
		}
		done, err := r.take(m)
		if err != nil {
			refuse(m, err)
			return r.res, err
		}
		if err := m.Respond(nil); err != nil {
			return r.res, fmt.Errorf("backup: acknowledge message %d: %w", r.res.Messages, err)
		}
		if done {
			return r.res, nil
		}
	}
}

// receiver takes the messages of one stream in order.
type receiver struct {
	w   io.Writer
	res Fetched
}

// next waits for the next message of the stream and returns it, or the
// error the service answered with.
func (r *receiver) next(ctx context.Context, sub *nats.Subscription, cfg FetchConfig) (*nats.Msg, error) {
	wctx, cancel := context.WithTimeout(ctx, cfg.Wait)
	defer cancel()
	m, err := sub.NextMsgWithContext(wctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && r.res.Messages == 0:
		return nil, fmt.Errorf("backup: no answer on %s within %v: %w", cfg.Subject, cfg.Wait, nats.ErrTimeout)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, fmt.Errorf("%w: no message after message %d within %v", ErrBroken, r.res.Messages, cfg.Wait)
	case err != nil:
		return nil, fmt.Errorf("backup: %w", err)
	}
	if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
		return nil, fmt.Errorf("backup: nothing answers on %s: %w", cfg.Subject, nats.ErrNoResponders)
	}
	if err := wire.ParseError(m.Header, m.Data); err != nil {
		return nil, fmt.Errorf("backup: the service stopped the stream after message %d: %w", r.res.Messages, err)
	}
	return m, nil
}

// take writes m's chunk, or checks the end against what came before it,
// and reports whether m ended the stream.
func (r *receiver) take(m *nats.Msg) (bool, error) {
	seq, err := strconv.ParseUint(m.Header.Get(wire.HeaderBackupSeq), 10, 64)
	if err != nil || seq != r.res.Messages+1 {
		return false, fmt.Errorf("%w: message %q after message %d", ErrBroken, m.Header.Get(wire.HeaderBackupSeq), r.res.Messages)
	}
	r.res.Messages = seq
	if end := m.Header.Get(wire.HeaderBackupEnd); end != "" {
		return true, r.end(end, m.Header.Get(wire.HeaderBackupRecords))
	}
	if _, err := r.w.Write(m.Data); err != nil {
		return false, fmt.Errorf("backup: write: %w", err)
	}
	r.res.Bytes += int64(len(m.Data))
	return false, nil
}

// end checks the end's length against the bytes received, and keeps its
// count of records for the check of the file.
func (r *receiver) end(length, records string) error {
	n, err := strconv.ParseInt(length, 10, 64)
	if err != nil || n != r.res.Bytes {
		return fmt.Errorf("%w: the end says %q bytes, %d came", ErrBroken, length, r.res.Bytes)
	}
	if r.res.Records, err = strconv.ParseUint(records, 10, 64); err != nil {
		return fmt.Errorf("%w: the end says %q records", ErrBroken, records)
	}
	return nil
}

// refuse tells the service that the stream stopped here, so that it does
// not wait for an acknowledgement.
func refuse(m *nats.Msg, err error) {
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set(wire.HeaderServiceError, err.Error())
	reply.Header.Set(wire.HeaderServiceErrorCode, "400")
	_ = m.RespondMsg(reply)
}

// checkFile reads the backup in path whole, its checksum included, and
// checks that it holds records keys.
func checkFile(path string, records uint64) error {
	n, err := readFile(path, nil)
	if err != nil {
		return err
	}
	if n != records {
		return fmt.Errorf("%w: the file holds %d records, the service sent %d", ErrBroken, n, records)
	}
	return nil
}

// readFile reads the backup in path, whole, calling each (if not nil)
// with its records in order, and returns how many it holds. An error of
// each stops it.
func readFile(path string, each func(key, value []byte) error) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	r, err := snapshot.NewReader(f)
	if err != nil {
		return 0, fmt.Errorf("backup: %s: %w", path, err)
	}
	for {
		k, v, ok, err := r.Next()
		if err != nil {
			return r.Count(), fmt.Errorf("backup: %s: %w", path, err)
		}
		if !ok {
			return r.Count(), nil
		}
		if each != nil {
			if err := each(k, v); err != nil {
				return r.Count(), err
			}
		}
	}
}

// removeMissing removes path; a path already gone is no error.
func removeMissing(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
