package bridge

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"natsdelay/delaystore"
	"natsdelay/dispatch"
)

// metrics are the Prometheus metrics of one Service. Counters that the
// dispatcher already keeps are exported as functions of its Stats, so there
// is one source of truth.
type metrics struct {
	ingest        *prometheus.CounterVec
	badAnswers    *prometheus.CounterVec
	storeFailures prometheus.Counter
	reopenFails   prometheus.Counter
	scheduled     prometheus.Counter
	commitBatch   prometheus.Histogram
	commitLatency prometheus.Histogram
	lateness      prometheus.Histogram
}

const namespace = "natsdelay"

func newMetrics() *metrics {
	m := &metrics{
		badAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "bad_answers_total",
			Help: "Answers to deliveries the service did not understand, which settle nothing, by reason: payload (not an ack word), tag (not a delivery tag) or no_tag (on the ack prefix without Delay-Tag).",
		}, []string{"reason"}),
		ingest: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "ingest_requests_total",
			Help: "Ingest messages by result: ok, invalid (400) or unavailable (503).",
		}, []string{"result"}),
		storeFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "store_failures_total",
			Help: "Times a write to disk failed the store (a failed WAL write or fsync, a full disk), each followed by a reopen.",
		}),
		reopenFails: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "store_reopen_failures_total",
			Help: "Reopens of a failed store that failed (the disk still full or failing), each followed by a wait.",
		}),
		scheduled: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "messages_scheduled_total",
			Help: "Messages durably stored by ingest.",
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "commit_batch_size",
			Help:    "Messages per group commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13),
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "commit_duration_seconds",
			Help:    "Time to commit one group of messages, fsync included.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
		}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "fire_lateness_seconds",
			Help:    "Delivery time minus fire time, for every delivery that reached a subscriber.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18),
		}),
	}
	for _, r := range []string{badAnswerPayload, badAnswerTag, badAnswerNoTag} {
		m.badAnswers.WithLabelValues(r)
	}
	return m
}

// Delivered implements dispatch.Observer.
func (m *metrics) Delivered(_ *delaystore.StoredMessage, _ uint32, lateness time.Duration) {
	m.lateness.Observe(lateness.Seconds())
}

// Committed implements core.Metrics.
func (m *metrics) Committed(batch int, took time.Duration, err error) {
	if err != nil {
		m.ingest.WithLabelValues("unavailable").Add(float64(batch))
		return
	}
	m.ingest.WithLabelValues("ok").Add(float64(batch))
	m.scheduled.Add(float64(batch))
	m.commitBatch.Observe(float64(batch))
	m.commitLatency.Observe(took.Seconds())
}

// StoreFailed implements core.Metrics.
func (m *metrics) StoreFailed() { m.storeFailures.Inc() }

// ReopenFailed implements core.Metrics.
func (m *metrics) ReopenFailed() { m.reopenFails.Inc() }

// register adds every metric of s to r.
func (m *metrics) register(r prometheus.Registerer, s *Service) error {
	stat := func(name, help string, f func(dispatch.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help},
			func() float64 { return float64(f(s.Stats())) })
	}
	cs := []prometheus.Collector{
		m.ingest, m.badAnswers, m.storeFailures, m.reopenFails, m.scheduled, m.commitBatch, m.commitLatency, m.lateness,
		stat("messages_delivered_total", "First deliveries that reached a subscriber (bounces are in no_responders_total).", func(st dispatch.Stats) uint64 { return st.Delivered }),
		stat("messages_redelivered_total", "Deliveries with attempt > 1 that reached a subscriber.", func(st dispatch.Stats) uint64 { return st.Redelivered }),
		stat("messages_acked_total", "ACKs that settled a pending message.", func(st dispatch.Stats) uint64 { return st.Acked }),
		stat("messages_nacked_total", "-NAK answers applied.", func(st dispatch.Stats) uint64 { return st.Nacked }),
		stat("messages_progress_total", "+WPI answers applied.", func(st dispatch.Stats) uint64 { return st.Progress }),
		stat("messages_termed_total", "+TERM answers applied.", func(st dispatch.Stats) uint64 { return st.Termed }),
		stat("messages_expired_total", "Messages removed because their TTL passed.", func(st dispatch.Stats) uint64 { return st.Expired }),
		stat("messages_dead_lettered_total", "Messages dead-lettered (max deliver, term, expiry).", func(st dispatch.Stats) uint64 { return st.DeadLettered }),
		stat("messages_canceled_total", "Messages canceled through the API.", func(st dispatch.Stats) uint64 { return st.Canceled }),
		stat("messages_undeliverable_total", "Messages the server would never take (too large for it), dead-lettered or parked.", func(st dispatch.Stats) uint64 { return st.Undeliverable }),
		stat("window_evictions_total", "Deliveries waiting longer than the ack wait, evicted from a full in-flight window so that other subjects get delivered; their subjects wait until their deadlines.", func(st dispatch.Stats) uint64 { return st.Evicted }),
		stat("occurrences_skipped_total", "Occurrences of recurring schedules missed and not delivered (Delay-Catch-Up: none).", func(st dispatch.Stats) uint64 { return st.Skipped }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "schedules", Help: "Recurring schedules with an occurrence still to come."},
			func() float64 { return float64(s.Repository().Schedules()) }),
		stat("no_responders_total", "Deliveries that reached no subscriber (not counted as attempts).", func(st dispatch.Stats) uint64 { return st.NoResponders }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "messages_pending", Help: "Messages stored and not yet settled."},
			func() float64 { return float64(s.Repository().Pending()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "dispatch_subjects", Help: "Subjects the dispatcher keeps state for: with messages due or in flight, or backing off."},
			func() float64 { return float64(s.Dispatcher().Stats().Topics) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "messages_in_flight", Help: "Messages delivered and waiting for an answer."},
			func() float64 { return float64(s.Dispatcher().Stats().InFlight) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "store_recovering", Help: "1 while the store has failed and is being reopened: ingest answers 503."},
			func() float64 {
				if s.core.Load().Down() != nil {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "ingest_invalid_unanswered_total", Help: "Invalid plain publishes (no reply subject to tell)."},
			func() float64 { return float64(s.invalid.Load()) }),
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
