package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/snapshot"
)

// SendConfig configures Send.
type SendConfig struct {
	// ChunkSize is the most bytes of the stream in one message. It must
	// be positive and fit the connection's max_payload with the headers.
	ChunkSize int
	// AckWait is how long Send waits for the requester to acknowledge
	// each message before it gives up.
	AckWait time.Duration
}

// Sent is what a stream held.
type Sent struct {
	// Bytes is the stream's length, Records the keys it holds, and
	// Messages the messages it took, the end included.
	Bytes    int64
	Records  uint64
	Messages uint64
}

// Send streams what it yields, in the snapshot format, to inbox on nc,
// one chunk per request, and waits for each acknowledgement before the
// next; then the end. It returns once the end was acknowledged, or at the
// first error: the requester gone (no responders), no acknowledgement
// within cfg.AckWait, an error answer, ctx ended, or a read of it failed.
// It does not close it. It tells the requester of a failure of its own
// (not of the requester's) with an error message in the micro convention.
func Send(ctx context.Context, nc *nats.Conn, inbox string, it delaystore.Iterator, cfg SendConfig) (Sent, error) {
	if cfg.ChunkSize <= 0 || cfg.AckWait <= 0 {
		return Sent{}, fmt.Errorf("%w: ChunkSize (%d) and AckWait (%v) must be > 0", ErrInvalidConfig, cfg.ChunkSize, cfg.AckWait)
	}
	w := &chunkWriter{ctx: ctx, nc: nc, inbox: inbox, wait: cfg.AckWait, buf: make([]byte, 0, cfg.ChunkSize)}
	n, err := snapshot.Write(w, it, 0)
	if err == nil {
		err = w.flush()
	}
	if err == nil {
		err = w.end(n)
	}
	sent := Sent{Bytes: w.total, Records: n, Messages: w.seq}
	if err != nil && !w.receiverFailed {
		tellError(nc, inbox, err)
	}
	return sent, err
}

// tellError sends the requester the error that ended its stream.
func tellError(nc *nats.Conn, inbox string, err error) {
	se := wire.NewServiceError(err)
	body, _ := json.Marshal(wire.ErrorReply{Error: se})
	m := nats.NewMsg(inbox)
	m.Header.Set(wire.HeaderServiceError, se.Description)
	m.Header.Set(wire.HeaderServiceErrorCode, strconv.Itoa(se.Code))
	m.Data = body
	_ = nc.PublishMsg(m)
}

// chunkWriter cuts what is written to it into chunks and sends each as
// soon as it is full.
type chunkWriter struct {
	ctx   context.Context
	nc    *nats.Conn
	inbox string
	wait  time.Duration
	buf   []byte
	seq   uint64
	total int64
	// receiverFailed is set when the requester is gone or answered with
	// an error: there is no one to tell.
	receiverFailed bool
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+n]
		p, written = p[n:], written+n
		if len(w.buf) == cap(w.buf) {
			if err := w.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush sends what is buffered, if anything.
func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	m := nats.NewMsg(w.inbox)
	m.Data = w.buf
	if err := w.send(m); err != nil {
		return err
	}
	w.total += int64(len(w.buf))
	// NB: the publish copied the data into the connection's buffer.
	w.buf = w.buf[:0]
	return nil
}

// end sends the last message, which tells the length and the records.
func (w *chunkWriter) end(records uint64) error {
	m := nats.NewMsg(w.inbox)
	m.Header.Set(wire.HeaderBackupEnd, strconv.FormatInt(w.total, 10))
	m.Header.Set(wire.HeaderBackupRecords, strconv.FormatUint(records, 10))
	return w.send(m)
}

// send numbers m, sends it and waits for its acknowledgement.
func (w *chunkWriter) send(m *nats.Msg) error {
	w.seq++
	m.Header.Set(wire.HeaderBackupSeq, strconv.FormatUint(w.seq, 10))
	ctx, cancel := context.WithTimeout(w.ctx, w.wait)
	defer cancel()
	reply, err := w.nc.RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		w.receiverFailed = true
		return fmt.Errorf("backup: message %d: the requester stopped listening", w.seq)
	case errors.Is(err, context.DeadlineExceeded) && w.ctx.Err() == nil:
		w.receiverFailed = true
		return fmt.Errorf("backup: message %d: no acknowledgement within %v", w.seq, w.wait)
	case err != nil:
		return fmt.Errorf("backup: message %d: %w", w.seq, err)
	}
	if err := wire.ParseError(reply.Header, reply.Data); err != nil {
		w.receiverFailed = true
		return fmt.Errorf("backup: message %d: the requester stopped: %w", w.seq, err)
	}
	return nil
}
