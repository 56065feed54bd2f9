package wire

// VerbBackup streams a consistent snapshot of the whole store to the
// request's reply subject, in chunks the requester acknowledges one by
// one (see BackupRequest and docs/protocol.md). In a cluster the leader
// answers, with the cluster's state.
const VerbBackup = "BACKUP"

// Headers of the messages of a backup stream.
const (
	// HeaderBackupSeq numbers the messages of a backup stream from 1: the
	// chunks, then the end. A gap or a repeat means the stream is broken.
	HeaderBackupSeq = "Delay-Backup-Seq"
	// HeaderBackupEnd marks the last message of a backup stream, which has
	// no data; its value is the stream's length in bytes.
	HeaderBackupEnd = "Delay-Backup-End"
	// HeaderBackupRecords, on the last message, is the number of keys the
	// stream holds.
	HeaderBackupRecords = "Delay-Backup-Records"
)

// Bounds of BackupRequest.ChunkSize.
const (
	// DefaultBackupChunk is the chunk size of a request that names none,
	// lowered to fit the connection's max payload.
	DefaultBackupChunk = 512 << 10
	// MinBackupChunk is the least chunk size a request may ask for.
	MinBackupChunk = 1 << 10
	// BackupHeaderRoom is what a chunk leaves of the max payload for its
	// headers.
	BackupHeaderRoom = 1 << 10
)

// BackupRequest asks for a backup (VerbBackup). Its reply subject must be
// a subject the requester subscribes to: every message of the stream
// goes there.
type BackupRequest struct {
	// ChunkSize is the most data bytes per message: 0 for
	// DefaultBackupChunk, else between MinBackupChunk and the server's
	// max_payload less BackupHeaderRoom.
	ChunkSize int `json:"chunk_size,omitempty"`
}
