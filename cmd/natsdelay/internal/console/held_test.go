package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// The Subjects page shows what SUBJECTS tells of each subject: its dead
// letters, linked to them, and whether it is held back, by a pause (and
// which pattern's) or at its in-flight limit; a paused subject is never
// shown as not held.
func TestConsole_Subjects_DeadAndPaused(t *testing.T) {
	s := serve(t, "127.0.0.1:0", true, nil)
	sub, err := s.nc.Subscribe("held.dies", func(m *nats.Msg) {
		if _, err := s.nc.Request(m.Reply, []byte("+TERM no"), 5*time.Second); err != nil {
			t.Errorf("+TERM: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s.schedule(t, "held.dies", []byte("x"), "Delay", "1ms")
	deadline := time.Now().Add(10 * time.Second)
	for dead(t, s, "held.dies") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no dead letter of held.dies within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.schedule(t, "held.dies", []byte("later"), "Delay", "1h")
	s.schedule(t, "held.paused", []byte("x"), "Delay", "1h")
	s.schedule(t, "held.paused.resumed", []byte("x"), "Delay", "1h")
	for _, p := range []string{"held.paused.>", "held.paused"} {
		if err := s.api(t, wire.VerbPause, wire.PatternRequest{Pattern: p}, nil); err != nil {
			t.Fatalf("PAUSE %s: %v", p, err)
		}
	}
	if err := s.api(t, wire.VerbLimitsSet, wire.Limit{Pattern: "held.paused.resumed", MaxInFlight: 5}, nil); err != nil {
		t.Fatal(err)
	}
	code, page, _ := get(t, s.base+"/ui/subjects", "", "")
	mustStatus(t, "subjects", code, http.StatusOK, page)
	for _, want := range []string{
		`<th scope="col" class="num">Dead</th>`,
		`<a href="/ui/subject?subject=held.dies">held.dies</a></th><td class="num">1</td><td class="num">0</td><td class="num">0</td><td class="num"><a href="/ui/dead?subject=held.dies">1</a></td><td>no</td>`,
		`<a href="/ui/subject?subject=held.paused">held.paused</a></th><td class="num">1</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td><a href="/ui/limits" class="bad">paused</a> by <code>held.paused</code></td>`,
		// NB: only the most specific pattern applies: its own, not paused.
		`<a href="/ui/subject?subject=held.paused.resumed">held.paused.resumed</a></th><td class="num">1</td><td class="num">0</td><td class="num">0</td><td class="num">0</td><td>no</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the Subjects page has no %s\n%s", want, page)
		}
	}
}

// dead is SUBJECTS' dead count of subject.
func dead(t testing.TB, s *served, subject string) uint64 {
	var rep wire.SubjectsReply
	if err := s.api(t, wire.VerbSubjects, wire.SubjectsRequest{Filter: subject}, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Subjects) == 0 {
		return 0
	}
	return rep.Subjects[0].Dead
}

// The dead letters page says how long dead letters are kept: the
// service's --dead-retention, in days when it is whole days, or until
// replayed or deleted when it keeps them so.
func TestConsole_Dead_StatesTheRetention(t *testing.T) {
	for _, tc := range []struct {
		retention time.Duration
		want      string
	}{
		{0, "Dead letters are kept for 7 days from their death, unless replayed or deleted first"},
		{36 * time.Hour, "Dead letters are kept for 36h0m0s from their death, unless replayed or deleted first"},
		{-1, "Dead letters are kept until they are replayed or deleted"},
	} {
		s := serve(t, "127.0.0.1:0", true, nil, func(o *server.Options) { o.Service.Expiry.DeadRetention = tc.retention })
		code, page, _ := get(t, s.base+"/ui/dead", "", "")
		mustStatus(t, "dead", code, http.StatusOK, page)
		if !strings.Contains(page, `<p id="retention">`+tc.want+` (<code>--dead-retention</code>).</p>`) {
			t.Errorf("--dead-retention %v: the dead letters page does not say %q\n%s", tc.retention, tc.want, page)
		}
	}
}
