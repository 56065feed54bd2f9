package raftlog

import (
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

const (
	// headerLen is the length and the CRC before a record's body.
	headerLen = 8
	// fixedLen is the body's fixed part: index, term, batch, type,
	// appendedAt, dataLen and extLen.
	fixedLen = 8 + 8 + 8 + 1 + 8 + 4 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends the record of l, written by the StoreLogs whose
// first entry is batch, to b.
func appendRecord(b []byte, l *raft.Log, batch uint64) []byte {
	start := len(b)
	bodyLen := fixedLen + len(l.Data) + len(l.Extensions)
	b = binary.BigEndian.AppendUint32(b, uint32(bodyLen))
	b = append(b, 0, 0, 0, 0) // the CRC, below
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = binary.BigEndian.AppendUint64(b, batch)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Extensions)))
	b = append(b, l.Extensions...)
	binary.BigEndian.PutUint32(b[start+4:], recordCRC(b[start:]))
	return b
}

// recordCRC is the CRC of rec, a whole record: its length and body.
func recordCRC(rec []byte) uint32 {
	c := crc32.Update(0, castagnoli, rec[:4])
	return crc32.Update(c, castagnoli, rec[headerLen:])
}

// recordLen returns the length of the whole record at the start of b, or
// 0 if b does not hold one whose CRC checks.
func recordLen(b []byte) int {
	if len(b) < headerLen+fixedLen {
		return 0
	}
	n := int(binary.BigEndian.Uint32(b))
	if n < fixedLen || n > len(b)-headerLen {
		return 0
	}
	rec := b[:headerLen+n]
	if recordCRC(rec) != binary.BigEndian.Uint32(rec[4:]) {
		return 0
	}
	body := rec[headerLen:]
	dataLen := int(binary.BigEndian.Uint32(body[33:]))
	if dataLen > n-fixedLen || int(binary.BigEndian.Uint32(body[37+dataLen:])) != n-fixedLen-dataLen {
		return 0
	}
	return headerLen + n
}

// recordIndex and recordBatch read the fields of a record recordLen
// accepted.
func recordIndex(rec []byte) uint64 { return binary.BigEndian.Uint64(rec[headerLen:]) }
func recordBatch(rec []byte) uint64 { return binary.BigEndian.Uint64(rec[headerLen+16:]) }

// decodeRecord fills l from rec, a record recordLen accepted. l's Data and
// Extensions alias rec.
func decodeRecord(rec []byte, l *raft.Log) {
	body := rec[headerLen:]
	l.Index = binary.BigEndian.Uint64(body)
	l.Term = binary.BigEndian.Uint64(body[8:])
	l.Type = raft.LogType(body[24])
	l.AppendedAt = time.Time{}
	if at := int64(binary.BigEndian.Uint64(body[25:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	dataLen := int(binary.BigEndian.Uint32(body[33:]))
	l.Data = nilIfEmpty(body[37 : 37+dataLen])
	l.Extensions = nilIfEmpty(body[fixedLen+dataLen:])
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b[:len(b):len(b)]
}
