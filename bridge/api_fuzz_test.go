package bridge_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/bridgetest"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/keys"
)

// fuzzRequest is a micro.Request that only carries a body: the API
// handlers are called directly, so what is fuzzed is the decoding and
// resolving, not the NATS round trip.
type fuzzRequest struct{ data []byte }

func (r fuzzRequest) Respond([]byte, ...micro.RespondOpt) error                { return nil }
func (r fuzzRequest) RespondJSON(any, ...micro.RespondOpt) error               { return nil }
func (r fuzzRequest) Error(_, _ string, _ []byte, _ ...micro.RespondOpt) error { return nil }
func (r fuzzRequest) Data() []byte                                             { return r.data }
func (r fuzzRequest) Headers() micro.Headers                                   { return nil }
func (r fuzzRequest) Subject() string                                          { return "$DELAY.API.FUZZ" }
func (r fuzzRequest) Reply() string                                            { return "" }

// fuzzService runs a real Service on an embedded server and an in-memory
// store, with one pending message (subject fuzz.a, id x), so that GET and
// LIST can find something. It returns that message's tag.
func fuzzService(tb testing.TB) (*bridge.Service, string) {
	tb.Helper()
	h := bridgetest.New(tb, nil)
	s, nc := h.Service, h.Conn
	m := nats.NewMsg(wire.DefaultIngestPrefix + ".fuzz.a")
	m.Header.Set(wire.HeaderDelay, "1000h")
	m.Header.Set(wire.HeaderID, "x")
	rep, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	var r struct {
		Tag string `json:"tag"`
	}
	if err := json.Unmarshal(rep.Data, &r); err != nil || r.Tag == "" {
		tb.Fatalf("schedule reply %q: %v", rep.Data, err)
	}
	return s, r.Tag
}

// FuzzAPIRequest checks that no API request body makes a handler panic or
// answer anything but a success, a 400 or a 404: a request decodes strictly
// or is a bad request, and a tag or (subject, id) that names nothing is a
// 404, never a store error. A successful reply must encode as JSON.
func FuzzAPIRequest(f *testing.F) {
	s, tag := fuzzService(f)
	verbs := bridge.APIHandlers(s)
	for _, body := range []string{
		"", "{}", " ", "null", "[]", `"x"`, "{} {}", "{}x",
		`{"tag":"` + tag + `"}`,
		`{"tag":"` + tag + `","payload":true}`,
		`{"subject":"fuzz.a","id":"x"}`,
		`{"subject":"fuzz.a","id":"x","tag":"` + tag + `"}`,
		`{"subject":"fuzz.a"}`,
		`{"subject":"fuzz.a","limit":1}`,
		`{"subject":"fuzz.a","limit":0}`,
		`{"subject":"fuzz.a","limit":1e400}`,
		`{"subject":"fuzz.a","limit":-1}`,
		`{"subject":"fuzz.a","after":"` + tag + `"}`,
		`{"subject":"fuzz.b","after":"` + tag + `"}`,
		`{"subject":"fuzz.*"}`,
		`{"filter":"fuzz.*"}`,
		`{"filter":"fuzz.>","limit":1,"after":"fuzz.a"}`,
		`{"filter":">.a"}`,
		`{"filter":"a*"}`,
		`{"subject":"a..b","id":"x"}`,
		`{"subject":"\xff","id":"x"}`,
		`{"tag":"ABCDEF000000000000000000000000000000000000000000"}`,
		`{"tag":"` + keys.New(1, 2, 3).Tag() + `"}`,
		`{"unknown":1}`,
		`{"tag":1}`,
		`{"payload":"yes"}`,
	} {
		for v := range verbs {
			f.Add(uint8(v), []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, verb uint8, body []byte) {
		v, err := verbs[int(verb)%len(verbs)](fuzzRequest{data: body})
		if err != nil {
			if !errors.Is(err, wire.ErrBadRequest) && !errors.Is(err, wire.ErrNotFound) {
				t.Fatalf("request %q: error %v is neither a 400 nor a 404", body, err)
			}
			if code := wire.Code(err); code != 400 && code != 404 {
				t.Fatalf("request %q: error %v answers %d", body, err, code)
			}
			return
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("request %q: reply %#v does not encode: %v", body, v, err)
		}
	})
}
