package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/natsdelay/natsdelay/delaystore"
)

const (
	magic   = "NDRS"
	version = 1
	// headerLen is the magic, the version and the applied index.
	headerLen = len(magic) + 1 + 8
	// trailerLen is the record count and the checksum after the end mark.
	trailerLen = 8 + 4
	// maxRecord bounds a key or a value a reader accepts, so that a
	// damaged length does not make it allocate without limit.
	maxRecord = 1 << 31
	bufSize   = 256 << 10
)

// ErrCorrupt is wrapped by the errors of Reader for a stream that is not
// a snapshot, or is cut short or damaged.
var ErrCorrupt = errors.New("snapshot: corrupt")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Write writes every key and value that it yields, from its first key on,
// to w, between the header that holds applied and the trailer, and
// returns the number of records. It does not close it. it must be
// positioned nowhere yet or anywhere: Write calls First.
func Write(w io.Writer, it delaystore.Iterator, applied uint64) (uint64, error) {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), bufSize)
	var scratch [binary.MaxVarintLen64]byte
	put := func(b []byte) {
		bw.Write(binary.AppendUvarint(scratch[:0], uint64(len(b))))
		bw.Write(b)
	}
	bw.WriteString(magic)
	bw.WriteByte(version)
	bw.Write(binary.BigEndian.AppendUint64(scratch[:0], applied))
	var n uint64
	for ok := it.First(); ok; ok = it.Next() {
		put(it.Key())
		put(it.Value())
		n++
	}
	if err := it.Error(); err != nil {
		return n, err
	}
	bw.WriteByte(0)
	bw.Write(binary.BigEndian.AppendUint64(scratch[:0], n))
	// bufio keeps the first write error and returns it from Flush.
	if err := bw.Flush(); err != nil {
		return n, err
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(scratch[:0], crc.Sum32()))
	return n, err
}

// A Reader reads the records of a snapshot stream in order. It is not
// safe for concurrent use.
type Reader struct {
	r       crcReader
	applied uint64
	n       uint64
	done    bool
	// key and value are read into the same two buffers each time.
	key, value []byte
}

// NewReader reads and checks the header of the stream in r.
func NewReader(r io.Reader) (*Reader, error) {
	sr := &Reader{r: crcReader{br: bufio.NewReaderSize(r, bufSize)}}
	header := make([]byte, headerLen)
	if _, err := io.ReadFull(&sr.r, header); err != nil {
		return nil, fmt.Errorf("%w: read header: %w", ErrCorrupt, err)
	}
	if string(header[:4]) != magic || header[4] != version {
		return nil, fmt.Errorf("%w: header %q, want %q and version %d", ErrCorrupt, header[:5], magic, version)
	}
	sr.applied = binary.BigEndian.Uint64(header[5:])
	return sr, nil
}

// Applied is the index of the last Raft command the stream holds, from
// its header: 0 for a stream taken outside a cluster.
func (r *Reader) Applied() uint64 { return r.applied }

// Count is the number of records read so far; once Next reported the end,
// the number the stream holds.
func (r *Reader) Count() uint64 { return r.n }

// Next reads the next record. Its key and value are valid until the next
// call. At the end of the records it reads the trailer and checks the
// count and the checksum: ok is false and err nil only for a whole
// stream; anything else wraps ErrCorrupt or the read's error.
func (r *Reader) Next() (key, value []byte, ok bool, err error) {
	if r.done {
		return nil, nil, false, nil
	}
	if r.key, err = r.chunk(r.key[:0]); err != nil {
		return nil, nil, false, err
	}
	if len(r.key) == 0 {
		r.done = true
		return nil, nil, false, r.trailer()
	}
	if r.value, err = r.chunk(r.value[:0]); err != nil {
		return nil, nil, false, err
	}
	r.n++
	return r.key, r.value, true, nil
}

// trailer reads the trailer and checks its count of records against the
// records read and its checksum against what was read before it.
func (r *Reader) trailer() error {
	var t [trailerLen]byte
	if _, err := io.ReadFull(r.r.br, t[:]); err != nil {
		return fmt.Errorf("%w: read trailer: %w", ErrCorrupt, err)
	}
	if got := binary.BigEndian.Uint64(t[:8]); got != r.n {
		return fmt.Errorf("%w: the trailer says %d records, the stream held %d", ErrCorrupt, got, r.n)
	}
	sum := crc32.Update(r.r.sum, castagnoli, t[:8])
	if got := binary.BigEndian.Uint32(t[8:]); got != sum {
		return fmt.Errorf("%w: checksum %08x, computed %08x", ErrCorrupt, got, sum)
	}
	if _, err := r.r.br.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: bytes after the trailer", ErrCorrupt)
	}
	return nil
}

// chunk reads one length-prefixed byte string into buf.
func (r *Reader) chunk(buf []byte) ([]byte, error) {
	n, err := binary.ReadUvarint(&r.r)
	if err != nil {
		return nil, fmt.Errorf("%w: truncated after %d records: %w", ErrCorrupt, r.n, err)
	}
	if n > maxRecord {
		return nil, fmt.Errorf("%w: a record of %d bytes", ErrCorrupt, n)
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(&r.r, buf); err != nil {
		return nil, fmt.Errorf("%w: truncated after %d records: %w", ErrCorrupt, r.n, err)
	}
	return buf, nil
}

// crcReader reads through br, keeping the CRC-32C of what it read. It is
// an io.ByteReader itself, so that reading a length allocates nothing.
type crcReader struct {
	br  *bufio.Reader
	sum uint32
	one [1]byte
}

func (r *crcReader) Read(p []byte) (int, error) {
	n, err := r.br.Read(p)
	r.sum = crc32.Update(r.sum, castagnoli, p[:n])
	return n, err
}

func (r *crcReader) ReadByte() (byte, error) {
	c, err := r.br.ReadByte()
	if err != nil {
		return 0, err
	}
	r.one[0] = c
	r.sum = crc32.Update(r.sum, castagnoli, r.one[:])
	return c, nil
}
