package bridge

import (
	"sync/atomic"
	"time"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// appendTime appends ns as wire.TimeLayout formats it in UTC, milliseconds
// truncated, without the layout parsing of time.Format, which was a large
// share of a delivery's cost. TestAppendTime_AsTimeFormat holds it to
// time.Format.
//
// A delivery writes two to four times and an ingest reply one, and most
// fall in a second written just before, so the text up to the second is
// kept for a few recent seconds (see secondTexts) and copied: the date
// and clock arithmetic was 3% of the serve process in the end-to-end
// bench.
func appendTime(b []byte, ns int64) []byte {
	if ns < 0 {
		return time.Unix(0, ns).UTC().AppendFormat(b, wire.TimeLayout)
	}
	sec := ns / int64(time.Second)
	ms := int(ns%int64(time.Second)) / int(time.Millisecond)
	slot := &secondTexts[sec%int64(len(secondTexts))]
	if st := slot.Load(); st != nil && st.sec == sec {
		b = append(b, st.text[:]...)
		return append(appendDigits(b, ms, 3), 'Z')
	}
	t := time.Unix(sec, 0).UTC()
	year, month, day := t.Date() // 1970 to 2262: four digits
	hour, minute, s := t.Clock()
	st := &secondText{sec: sec}
	text := appendDigits(st.text[:0], year, 4)
	text = append(text, '-')
	text = appendDigits(text, int(month), 2)
	text = append(text, '-')
	text = appendDigits(text, day, 2)
	text = append(text, 'T')
	text = appendDigits(text, hour, 2)
	text = append(text, ':')
	text = appendDigits(text, minute, 2)
	text = append(text, ':')
	text = appendDigits(text, s, 2)
	_ = append(text, '.')
	slot.Store(st)
	b = append(b, st.text[:]...)
	return append(appendDigits(b, ms, 3), 'Z')
}

// secondText is one second's text up to its milliseconds:
// "2006-01-02T15:04:05.".
type secondText struct {
	sec  int64
	text [len("2006-01-02T15:04:05.")]byte
}

// secondTexts keeps the seconds written last, each in the slot of its
// number modulo their count, for every goroutine: a slot is replaced
// whole, never written in place. Seven slots keep a message's fire time
// and its enqueue time apart unless its delay is a multiple of 7 s, and
// then a miss costs one small allocation.
var secondTexts [7]atomic.Pointer[secondText]

// appendDigits appends v, which is not negative, as exactly width digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [4]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}
