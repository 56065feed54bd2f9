package bridge

import "testing"

// A stream's answers are told apart from other JSON: a PubAck has a stream
// and a sequence, an error a code or a description; anything else is not a
// stream's answer, and stays a bad answer.
func TestParseStreamAnswer(t *testing.T) {
	for _, c := range []struct {
		in        string
		ok, isErr bool
		dup       bool
	}{
		{`{"stream":"JOBS","seq":1}`, true, false, false},
		{` {"stream":"JOBS","domain":"hub","seq":7,"duplicate":true}`, true, false, true},
		{`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"FULL","seq":0}`, true, true, false},
		{`{"error":{"code":400,"description":"bad"}}`, true, true, false},
		{`{"stream":"JOBS"}`, false, false, false},
		{`{"seq":1}`, false, false, false},
		{`{"error":{}}`, false, false, false},
		{`{"delay":5}`, false, false, false},
		{`{"stream":`, false, false, false},
		{`+ACK`, false, false, false},
		{``, false, false, false},
	} {
		a, ok := parseStreamAnswer([]byte(c.in))
		if ok != c.ok || ok && ((a.Error != nil) != c.isErr || a.Duplicate != c.dup) {
			t.Errorf("parseStreamAnswer(%q) = %+v, %v; want ok %v, error %v, duplicate %v", c.in, a, ok, c.ok, c.isErr, c.dup)
		}
	}
}
