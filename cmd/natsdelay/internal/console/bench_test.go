package console_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// load schedules perSubject messages on each of subjects subjects,
// bench.<i>, an hour ahead, through ingest, with up to 1,000 waiting for
// their answer, and returns the tag of one message.
func (s *served) load(b *testing.B, subjects, perSubject int) string {
	b.Helper()
	answers := make(chan *nats.Msg, 1024)
	inbox := nats.NewInbox()
	sub, err := s.nc.ChanSubscribe(inbox, answers)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	total := subjects * perSubject
	window := make(chan struct{}, 1000)
	var tag string
	got := make(chan error, 1)
	go func() {
		for i := range total {
			m := <-answers
			<-window
			if err := wire.ParseError(m.Header, m.Data); err != nil {
				got <- fmt.Errorf("answer %d: %w", i, err)
				return
			}
			if i == 0 {
				var a struct {
					Tag string `json:"tag"`
				}
				_ = json.Unmarshal(m.Data, &a)
				tag = a.Tag
			}
		}
		got <- nil
	}()
	payload := []byte(`{"order":12345,"items":[1,2,3],"note":"a payload of about a hundred bytes, as orders often are"}`)
	for i := range total {
		window <- struct{}{}
		m := nats.NewMsg(fmt.Sprintf("%s.bench.%05d", wire.DefaultIngestPrefix, i%subjects))
		m.Reply, m.Data = inbox, payload
		m.Header.Set(wire.HeaderDelay, fmt.Sprintf("%ds", 3600+i%600))
		if err := s.nc.PublishMsg(m); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(5 * time.Minute):
		b.Fatal("the load's answers did not all come within 5 minutes")
	}
	return tag
}

// BenchmarkConsole_Pages measures each page's answer over real HTTP from a
// service holding 100,000 pending messages on 10,000 subjects, with 50
// recurring schedules and 20 limits: the time from the request to the
// last byte of the page, which is the server's work (loopback, no
// browser). Each page must stay under 200 ms; the figures are in
// docs/operations.md. Run it with
//
//	go test -run '^$' -bench Console_Pages -benchtime 20x ./cmd/natsdelay/internal/console
func BenchmarkConsole_Pages(b *testing.B) {
	s := serve(b, "127.0.0.1:0", true, nil)
	start := time.Now()
	tag := s.load(b, 10_000, 10)
	for i := range 50 {
		s.schedule(b, fmt.Sprintf("reports.%02d", i), []byte("report"), "Delay-Cron", "0 9 * * 1-5", "Delay-TZ", "Europe/Paris")
	}
	for i := range 20 {
		if err := s.api(b, wire.VerbLimitsSet, wire.Limit{Pattern: fmt.Sprintf("tenant%02d.>", i), Rate: 100}, nil); err != nil {
			b.Fatal(err)
		}
	}
	var info wire.InfoReply
	if err := s.api(b, wire.VerbInfo, nil, &info); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d pending on %d subjects in %s", info.Counts.Pending, info.Counts.Subjects, time.Since(start).Round(time.Millisecond))
	if info.Counts.Pending < 100_000 || info.Counts.Subjects < 10_000 {
		b.Fatalf("loaded %d pending on %d subjects, want 100,000 on 10,000", info.Counts.Pending, info.Counts.Subjects)
	}
	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"subjects", "/ui/subjects"},
		{"subjects_filtered", "/ui/subjects?filter=bench.*"},
		{"subjects_page_100", "/ui/subjects?after=bench.04999"},
		{"subject", "/ui/subject?subject=bench.04321"},
		{"message", "/ui/message?tag=" + tag},
		{"schedules", "/ui/schedules"},
		{"limits", "/ui/limits"},
		{"dead_letters", "/ui/dead"},
		{"bulk_form", "/ui/bulk"},
		{"bulk_dry_run_one_subject", "/ui/bulk?run=dry&verb=cancel&subject=bench.04321"},
		{"bulk_dry_run_wildcard", "/ui/bulk?run=dry&verb=cancel&subject=bench.*"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var worst time.Duration
			for b.Loop() {
				t0 := time.Now()
				code, body, _ := get(b, s.base+p.path, "", "")
				worst = max(worst, time.Since(t0))
				if code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", p.path, code, body)
				}
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
		})
	}
}
