package bridge

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge/backup"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// backupAckWait is how long a backup stream waits for the requester to
// acknowledge a chunk: its disk may be slow, but a requester gone for
// that long has given up.
const backupAckWait = 30 * time.Second

// backups is the one backup stream a Service runs at a time: each holds a
// view of the store, which pins the engine's files.
type backups struct {
	mu      sync.Mutex
	running bool
	closed  bool
	wg      sync.WaitGroup
}

// start reports whether a stream may start (none runs, and close was not
// called), and if so marks one running: the caller runs it and then
// calls done.
func (b *backups) start() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running || b.closed {
		return false
	}
	b.running = true
	b.wg.Add(1)
	return true
}

// close refuses new streams and waits for the one running, if any.
func (b *backups) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *backups) done() {
	b.mu.Lock()
	b.running = false
	b.mu.Unlock()
	b.wg.Done()
}

// handleBackup answers BACKUP: it opens a view of the store and streams
// it to the request's reply subject from a goroutine that Close ends and
// waits for (see package backup).
func (s *Service) handleBackup(req micro.Request) {
	if req.Reply() == "" {
		return
	}
	if err := s.answering(); err != nil {
		respondError(req, err)
		return
	}
	var r wire.BackupRequest
	if err := decodeRequest(req.Data(), &r); err != nil {
		respondError(req, err)
		return
	}
	chunk, err := s.backupChunk(r.ChunkSize)
	if err != nil {
		respondError(req, err)
		return
	}
	if !s.backups.start() {
		respondError(req, unavailable("a backup is under way, or the service is stopping; ask again later"))
		return
	}
	it, err := s.core.Load().NewSnapshot()
	if err != nil {
		s.backups.done()
		respondError(req, err)
		return
	}
	inbox := req.Reply()
	go func() {
		defer s.backups.done()
		defer it.Close()
		start := time.Now()
		s.log.Info("backup started", "to", inbox)
		sent, err := backup.Send(s.closeCtx, s.nc, inbox, it, backup.SendConfig{ChunkSize: chunk, AckWait: backupAckWait})
		if err != nil {
			s.log.Warn("backup failed", "to", inbox, "bytes", sent.Bytes, "err", err)
			return
		}
		s.log.Info("backup sent", "to", inbox, "keys", sent.Records, "bytes", sent.Bytes, "took", time.Since(start).Round(time.Millisecond))
	}()
}

// backupChunk is the chunk size for a request that asked for asked bytes
// (0: the default), within the connection's max payload.
func (s *Service) backupChunk(asked int) (int, error) {
	most := int(s.nc.MaxPayload()) - wire.BackupHeaderRoom
	if asked == 0 {
		return min(wire.DefaultBackupChunk, most), nil
	}
	if asked < wire.MinBackupChunk || asked > most {
		return 0, badRequest("chunk_size %d: want between %d and %d (the server's max_payload less %d for headers)",
			asked, wire.MinBackupChunk, most, wire.BackupHeaderRoom)
	}
	return asked, nil
}
