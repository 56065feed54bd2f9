package delaystore

import "strings"

// traceParentHeader is W3C Trace Context's traceparent header, which a
// message carries among its headers as the publisher sent it.
const traceParentHeader = "traceparent"

// TraceParent returns the message's traceparent header, matched in any
// case as HTTP and W3C Trace Context match it, or "" if it has none. The
// stored headers are the publisher's, so it is the trace of the publish.
func (m *StoredMessage) TraceParent() string {
	for _, h := range m.GetHeaders() {
		if len(h.Name) == len(traceParentHeader) && strings.EqualFold(h.Name, traceParentHeader) && len(h.Values) > 0 {
			return h.Values[0]
		}
	}
	return ""
}

// TraceID is the trace id of the message's traceparent, or zero if it
// has none that is well formed (see TraceIDOf).
func (m *StoredMessage) TraceID() [16]byte {
	id, _ := TraceIDOf(m.TraceParent())
	return id
}

// TraceIDOf returns the trace id of a W3C traceparent value,
// "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>", and reports
// whether v is one: a version other than ff (a later version may add
// fields after a dash), lowercase hex, and ids that are not all zeros.
// Spaces around v are ignored, as around any header value.
func TraceIDOf(v string) (id [16]byte, ok bool) {
	v = strings.TrimSpace(v)
	const n = len("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if len(v) < n || (v[:2] == "00" && len(v) != n) || (len(v) > n && v[n] != '-') {
		return id, false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' || v[:2] == "ff" {
		return id, false
	}
	if !lowerHex(v[:2]) || !lowerHex(v[53:55]) || !lowerHex(v[36:52]) || v[36:52] == "0000000000000000" {
		return id, false
	}
	var any byte
	for i := range id {
		hi, lo := unhex(v[3+2*i]), unhex(v[4+2*i])
		if hi > 15 || lo > 15 {
			return [16]byte{}, false
		}
		id[i] = hi<<4 | lo
		any |= id[i]
	}
	return id, any != 0
}

// lowerHex reports whether s is lowercase hex digits only.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if unhex(s[i]) > 15 {
			return false
		}
	}
	return true
}

// unhex is the value of the lowercase hex digit c, or 255.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}
