package bridge

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch/recur"
)

// TestParseSchedule_Recurrence checks every recurring-schedule header, in
// any case, and the first occurrence each gives.
func TestParseSchedule_Recurrence(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	lim := scheduleLimits{reserved: []string{"delay"}}
	tests := []struct {
		name  string
		h     nats.Header
		first time.Time
		want  *delaystore.Recurrence
	}{
		{"every", nats.Header{"Delay-Every": {"90s"}}, now.Add(90 * time.Second),
			&delaystore.Recurrence{EveryNs: int64(90 * time.Second)}},
		{"every in days", nats.Header{"delay-every": {"1d"}}, now.Add(24 * time.Hour),
			&delaystore.Recurrence{EveryNs: int64(24 * time.Hour)}},
		{"every with delay", nats.Header{"Delay-Every": {"100ms"}, "Delay": {"5s"}}, now.Add(5 * time.Second),
			&delaystore.Recurrence{EveryNs: int64(100 * time.Millisecond)}},
		{"cron utc", nats.Header{"Delay-Cron": {"*/15 * * * *"}}, now.Add(15 * time.Minute),
			&delaystore.Recurrence{Cron: "*/15 * * * *"}},
		{"cron seconds", nats.Header{"DELAY-CRON": {"30 * * * * *"}}, now.Add(30 * time.Second),
			&delaystore.Recurrence{Cron: "30 * * * * *"}},
		{"cron descriptor in zone", nats.Header{"Delay-Cron": {"@daily"}, "Delay-TZ": {"America/New_York"}}, time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC),
			&delaystore.Recurrence{Cron: "@daily", Zone: "America/New_York"}},
		{"cron with at", nats.Header{"Delay-Cron": {"@hourly"}, "Delay-At": {"2026-12-03T10:20:00Z"}}, now.Add(20 * time.Minute),
			&delaystore.Recurrence{Cron: "@hourly"}},
		{"until rfc 3339, limit, catch-up", nats.Header{"Delay-Every": {"1m"}, "Delay-Until": {"2026-12-04T00:00:00Z"}, "Delay-Limit": {"7"}, "Delay-Catch-Up": {"ALL"}}, now.Add(time.Minute),
			&delaystore.Recurrence{EveryNs: int64(time.Minute), UntilNs: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC).UnixNano(), Limit: 7, CatchUp: recur.All}},
		{"until unix, catch-up none", nats.Header{"Delay-Every": {"1m"}, "Delay-Until": {"1796299200"}, "delay-catch-up": {"none"}}, now.Add(time.Minute),
			&delaystore.Recurrence{EveryNs: int64(time.Minute), UntilNs: time.Unix(1796299200, 0).UnixNano(), CatchUp: recur.None}},
		{"id names the schedule", nats.Header{"Delay-Every": {"1m"}, "Delay-Id": {"nightly"}, "Delay-Catch-Up": {"one"}}, now.Add(time.Minute),
			&delaystore.Recurrence{EveryNs: int64(time.Minute), Id: "nightly"}},
		{"overlap buffer-one", nats.Header{"Delay-Every": {"1m"}, "Delay-Overlap": {"Buffer-One"}}, now.Add(time.Minute),
			&delaystore.Recurrence{EveryNs: int64(time.Minute), Overlap: delaystore.Overlap_OVERLAP_BUFFER_ONE}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := parseSchedule("a.b", tt.h, nil, now, lim)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.OccurrenceNs, tt.want.Seq = tt.first.UnixNano(), 1
			if m.Recurrence.String() != tt.want.String() {
				t.Fatalf("recurrence\n%v\nwant\n%v", m.Recurrence, tt.want)
			}
			if m.FireAtNs != tt.first.UnixNano() {
				t.Fatalf("fire at %v, want %v", time.Unix(0, m.FireAtNs).UTC(), tt.first)
			}
			if len(m.Headers) != 0 {
				t.Fatalf("control headers stored: %v", m.Headers)
			}
		})
	}
	// An occurrence has no expiry until it goes out.
	m, err := parseSchedule("a.b", nats.Header{"Delay-Every": {"1m"}, "Delay-TTL": {"10s"}}, nil, now, lim)
	if err != nil || m.ExpireAtNs != 0 || m.TtlNs != int64(10*time.Second) {
		t.Fatalf("TTL on a schedule: %v, %v", m, err)
	}
}

// TestParseSchedule_RecurrenceErrors checks the 400s, each of which says
// what is accepted.
func TestParseSchedule_RecurrenceErrors(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	lim := scheduleLimits{reserved: []string{"delay"}}
	tests := []struct {
		name string
		h    nats.Header
		want string
	}{
		{"bad cron", nats.Header{"Delay-Cron": {"* * *"}}, "want 5 fields"},
		{"cron out of range", nats.Header{"Delay-Cron": {"61 * * * *"}}, "want 5 fields"},
		{"cron never", nats.Header{"Delay-Cron": {"0 0 30 2 *"}}, "matches no date, so it would never fire"},
		{"cron @every", nats.Header{"Delay-Cron": {"@every 5m"}}, "@yearly @monthly"},
		{"unknown zone", nats.Header{"Delay-Cron": {"@daily"}, "Delay-TZ": {"Europe/Atlantis"}}, "IANA zone name such as Europe/Berlin"},
		{"empty zone", nats.Header{"Delay-Cron": {"@daily"}, "Delay-TZ": {""}}, "IANA zone name"},
		{"every and cron", nats.Header{"Delay-Cron": {"@daily"}, "Delay-Every": {"1h"}}, "want one of them"},
		{"every too short", nats.Header{"Delay-Every": {"99ms"}}, "at least 100ms"},
		{"every not a duration", nats.Header{"Delay-Every": {"often"}}, "want a Go duration"},
		{"zone with every", nats.Header{"Delay-Every": {"1h"}, "Delay-TZ": {"UTC"}}, "applies to Delay-Cron only"},
		{"until alone", nats.Header{"Delay-Until": {"1796299200"}}, "want it only on a recurring schedule"},
		{"catch-up alone", nats.Header{"Delay-Catch-Up": {"all"}}, "want it only on a recurring schedule"},
		{"until bad", nats.Header{"Delay-Every": {"1h"}, "Delay-Until": {"tomorrow"}}, "want RFC 3339"},
		{"until before start", nats.Header{"Delay-Every": {"1h"}, "Delay-Until": {"2026-12-03T10:30:00Z"}}, "before the first occurrence"},
		{"until before given start", nats.Header{"Delay-Every": {"1s"}, "Delay": {"2h"}, "Delay-Until": {"2026-12-03T11:00:00Z"}}, "want an end after the start"},
		{"limit zero", nats.Header{"Delay-Every": {"1h"}, "Delay-Limit": {"0"}}, "want a positive integer"},
		{"limit negative", nats.Header{"Delay-Every": {"1h"}, "Delay-Limit": {"-3"}}, "want a positive integer"},
		{"catch-up bad", nats.Header{"Delay-Every": {"1h"}, "Delay-Catch-Up": {"some"}}, "want one, all or none"},
		{"overlap alone", nats.Header{"Delay-Overlap": {"skip"}}, "want it only on a recurring schedule"},
		{"overlap bad", nats.Header{"Delay-Every": {"1h"}, "Delay-Overlap": {"queue"}}, "want allow, skip or buffer-one"},
		{"cron twice", nats.Header{"Delay-Cron": {"@daily", "@hourly"}}, "given 2 times"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseSchedule("a.b", tt.h, nil, now, lim)
			if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want a bad request saying %q", err, tt.want)
			}
		})
	}
}
