package bridge

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge/events"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
)

// metrics are the Prometheus metrics of one Service. Counters that the
// dispatcher already keeps are exported as functions of its Stats, so there
// is one source of truth.
type metrics struct {
	ingest        *prometheus.CounterVec
	badAnswers    *prometheus.CounterVec
	streamAnswers *prometheus.CounterVec
	streamErrors  *prometheus.CounterVec
	storeFailures prometheus.Counter
	reopenFails   prometheus.Counter
	scheduled     prometheus.Counter
	commitBatch   prometheus.Histogram
	commitLatency prometheus.Histogram
	lateness      prometheus.Histogram
	heldLateness  prometheus.Histogram
	leaderChanges prometheus.Counter
	// throttleFolded counts throttled publishes folded into the delivery
	// already planned (Delay-Throttle).
	throttleFolded prometheus.Counter

	// totals are kept beside the metrics, for Service.Totals.
	totals totals
}

const namespace = "natsdelay"

func newMetrics() *metrics {
	m := &metrics{
		badAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "bad_answers_total",
			Help: "Answers to deliveries the service did not understand, which settle nothing, by reason: payload (not an ack word), tag (not a delivery tag) or no_tag (on the ack prefix without Delay-Tag).",
		}, []string{"reason"}),
		streamAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "stream_answers_total",
			Help: "Deliveries answered by a JetStream stream that captures their subject, by result: stored (a PubAck: settled as an ACK), duplicate (a PubAck for a message the stream had already: settled) or error (the stream refused it: a failed attempt, delivered again after its back-off).",
		}, []string{"result"}),
		streamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "jetstream_errors_total",
			Help: "Deliveries a JetStream stream refused to store, each a failed attempt delivered again after its back-off, by the stream's err_code (10077 maximum messages exceeded, 10047 insufficient resources, ...; other outside JetStream's range).",
		}, []string{"err_code"}),
		ingest: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "ingest_requests_total",
			Help: "Ingest messages by result: ok (stored), duplicate (a resend within the duplicate window, answered with the first reply), invalid (400) or unavailable (503).",
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
			Help:    "Delivery time minus fire time, for every delivery that reached a subscriber, but those held back by a limit or a pause (fire_held_lateness_seconds).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18),
		}),
		heldLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "fire_held_lateness_seconds",
			Help:    "Delivery time minus fire time, for deliveries whose subject was held back by its in-flight limit, its rate or a pause when they fell due.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 24),
		}),
	}
	m.throttleFolded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Name: "throttle_folded_total",
		Help: "Throttled publishes (Delay-Throttle) folded into the delivery their subject and id already had planned: each replaced that message's payload and headers, and was not delivered on its own.",
	})
	m.leaderChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "cluster", Name: "leadership_changes_total",
		Help: "Times this node became the cluster leader or stopped being it.",
	})
	for _, r := range []string{badAnswerPayload, badAnswerTag, badAnswerNoTag} {
		m.badAnswers.WithLabelValues(r)
	}
	for _, r := range []string{streamStored, streamDuplicate, streamError} {
		m.streamAnswers.WithLabelValues(r)
	}
	// One value shown at 0 makes the family visible before the first
	// refusal, so that dashboards and alerts find it.
	m.streamErrors.WithLabelValues(errCodeLabel(0))
	return m
}

// errCodeLabel is the err_code label of a stream's error answer: the code
// within JetStream's range of them, else other, so that an answer from
// outside JetStream cannot grow the label's values without bound.
func errCodeLabel(code int) string {
	if code < 10000 || code > 10999 {
		return "other"
	}
	return strconv.Itoa(code)
}

// Delivered implements dispatch.Observer.
func (m *metrics) Delivered(_ *delaystore.StoredMessage, _ uint32, lateness time.Duration, held bool) {
	if held {
		m.heldLateness.Observe(lateness.Seconds())
		return
	}
	m.lateness.Observe(lateness.Seconds())
	m.totals.delivered(lateness)
}

// Committed implements core.Metrics.
func (m *metrics) Committed(batch int, took time.Duration, err error) {
	if err != nil {
		m.ingest.WithLabelValues("unavailable").Add(float64(batch))
		return
	}
	m.ingest.WithLabelValues("ok").Add(float64(batch))
	m.scheduled.Add(float64(batch))
	m.totals.ingested.Add(uint64(batch))
	m.commitBatch.Observe(float64(batch))
	m.commitLatency.Observe(took.Seconds())
}

// folded counts one throttled publish folded into a planned delivery.
func (m *metrics) folded() {
	m.throttleFolded.Inc()
	m.totals.folded.Add(1)
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
		m.ingest, m.badAnswers, m.streamAnswers, m.streamErrors, m.storeFailures, m.reopenFails, m.scheduled, m.commitBatch, m.commitLatency, m.lateness, m.heldLateness, m.throttleFolded,
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
		stat("dispatch_passes_fenced_total", "Turns of the dispatcher skipped because this node of a cluster did not hold the leadership lease of the leadership it serves in (a pause, a slow lease renewal, a leadership lost and won back before the node stopped the work of the first, or a store just reopened that the node does not serve on yet): nothing was delivered in them.", func(st dispatch.Stats) uint64 { return st.FencedPasses }),
		stat("deliveries_fenced_total", "Deliveries held back, to go out later, because this node of a cluster did not hold its leadership lease at the moment of publishing (a pause, or a slow lease renewal).", func(st dispatch.Stats) uint64 { return st.Fenced }),
		stat("messages_handed_off_total", "Messages due when their batch committed that went from the commit to the next delivery pass with no read of the store.", func(st dispatch.Stats) uint64 { return st.HandedOff }),
		stat("passes_staged_total", "Delivery passes of bursts of recurring occurrences read before the burst fell due and published at its time.", func(st dispatch.Stats) uint64 { return st.StagedPasses }),
		stat("occurrences_skipped_total", "Occurrences of recurring schedules missed and not delivered (Delay-Catch-Up: none).", func(st dispatch.Stats) uint64 { return st.Skipped }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "schedules", Help: "Recurring schedules with an occurrence still to come."},
			func() float64 { return float64(orZero(s.servingRepository(), (*delaystore.Repository).Schedules)) }),
		stat("no_responders_total", "Deliveries that reached no subscriber (not counted as attempts).", func(st dispatch.Stats) uint64 { return st.NoResponders }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "messages_pending", Help: "Messages stored and not yet settled."},
			func() float64 { return float64(orZero(s.servingRepository(), (*delaystore.Repository).Pending)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "dead_letters", Help: "Dead letters kept in the store, until replayed, deleted or past --dead-retention."},
			func() float64 { return float64(orZero(s.servingRepository(), (*delaystore.Repository).Dead)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "dispatch_subjects", Help: "Subjects the dispatcher keeps state for: with messages due or in flight, or backing off."},
			func() float64 { return float64(s.dispatchStats().Topics) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "messages_in_flight", Help: "Messages delivered and waiting for an answer."},
			func() float64 { return float64(s.dispatchStats().InFlight) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "subjects_limited", Help: "Subjects at their in-flight limit with more due: their next deliveries wait for answers to those in flight (INFO names them)."},
			func() float64 { return float64(s.dispatchStats().Limited) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "memory_releases_total", Help: "Times the service handed memory back to the OS once quiet after a burst of writes (--idle-release)."},
			func() float64 { return float64(s.core.Load().MemoryReleases()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "store_recovering", Help: "1 while the store has failed and is being reopened: ingest answers 503."},
			func() float64 {
				if err := s.core.Load().Down(); err != nil && !errors.Is(err, errNotLeader) {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "ingest_invalid_unanswered_total", Help: "Invalid plain publishes (no reply subject to tell)."},
			func() float64 { return float64(s.invalid.Load()) }),
	}
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "events_published_total",
		Help: "Lifecycle events (--events) handed to the NATS connection."},
		func() float64 { return float64(s.events.Stats().Published) }))
	for _, r := range []struct {
		reason string
		n      func(events.Stats) uint64
	}{
		{"full", func(st events.Stats) uint64 { return st.Dropped }},
		{"failed", func(st events.Stats) uint64 { return st.Failed }},
		{"fenced", func(st events.Stats) uint64 { return st.Fenced }},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "events_dropped_total",
			Help:        "Lifecycle events (--events) not published, by reason: full (the queue was full: they came faster than the connection took them), failed (the connection refused them: closed, or reconnecting with its buffer full) or fenced (this node of a cluster did not hold its lease). Events are best effort: delivery never waits for them.",
			ConstLabels: prometheus.Labels{"reason": r.reason}},
			func() float64 { return float64(r.n(s.events.Stats())) }))
	}
	cs = append(cs, answerMetrics(s.answers)...)
	if s.cluster != nil {
		cs = append(cs, m.leaderChanges, &clusterCollector{s: s})
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// answerMetrics are the answerer's counters and queue.
func answerMetrics(a *answerer) []prometheus.Collector {
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "answers_sent_total",
			Help: "Answers to ingest requests and to AckSyncs handed to the NATS connection."},
			func() float64 { return float64(a.Stats().Sent) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "answers_queued",
			Help: "Answers to ingest requests and to AckSyncs waiting to be published."},
			func() float64 { return float64(a.Stats().Queued) }),
	}
	for _, r := range []struct {
		reason string
		n      func(answererStats) uint64
	}{
		{"full", func(st answererStats) uint64 { return st.Full }},
		{"failed", func(st answererStats) uint64 { return st.Failed }},
		{"closed", func(st answererStats) uint64 { return st.Late }},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "answers_dropped_total",
			Help:        "Answers to ingest requests and to AckSyncs not published, by reason: full (the queue stayed full for a second: the connection did not take them), failed (the connection refused them: closed, or reconnecting with its buffer full) or closed (handed over after the service closed). The requester times out and asks again; what the answer reported is stored.",
			ConstLabels: prometheus.Labels{"reason": r.reason}},
			func() float64 { return float64(r.n(a.Stats())) }))
	}
	return cs
}

// orZero is f(r), or 0 while there is no repository: a node of a cluster
// that has not led yet.
func orZero(r *delaystore.Repository, f func(*delaystore.Repository) uint64) uint64 {
	if r == nil {
		return 0
	}
	return f(r)
}

// servingRepository is the repository of the generation that serves, or
// nil on a node of a cluster that does not lead: the one it kept from when
// it last led holds stale counts.
func (s *Service) servingRepository() *delaystore.Repository {
	if !s.Leader() {
		return nil
	}
	return s.core.Load().Repository()
}

// dispatchStats is the serving dispatcher's stats, zero while there is
// none (see servingRepository).
func (s *Service) dispatchStats() dispatch.Stats {
	if d := s.core.Load().Dispatcher(); d != nil && s.Leader() {
		return d.Stats()
	}
	return dispatch.Stats{}
}

// clusterCollector exports a node's view of its cluster at each scrape:
// its role, term, commit and applied index, and on the leader each
// member's applied index and lag, asked over CLUSTER.STATUS then.
type clusterCollector struct{ s *Service }

var (
	clusterRoleDesc = prometheus.NewDesc(namespace+"_cluster_role",
		"1 for this node's role in the cluster (leader, follower, candidate, shutdown), 0 for the others.", []string{"role"}, nil)
	clusterTermDesc = prometheus.NewDesc(namespace+"_cluster_term",
		"The Raft term this node is in.", nil, nil)
	clusterCommitDesc = prometheus.NewDesc(namespace+"_cluster_commit_index",
		"The last log index this node knows committed by a quorum.", nil, nil)
	clusterAppliedDesc = prometheus.NewDesc(namespace+"_cluster_applied_index",
		"The last log index this node applied to its store.", nil, nil)
	clusterPeerAppliedDesc = prometheus.NewDesc(namespace+"_cluster_peer_applied_index",
		"On the leader: each member's applied index, as it answered CLUSTER.STATUS at the scrape.", []string{"peer"}, nil)
	clusterLagDesc = prometheus.NewDesc(namespace+"_cluster_peer_lag_entries",
		"On the leader: each member's replication lag, the leader's commit index minus the member's applied index.", []string{"peer"}, nil)
	clusterLagEntriesDesc = prometheus.NewDesc(namespace+"_cluster_lag_entries",
		"On a node that does not lead: the leader's commit index it last heard minus its applied index; 0 on the leader.", nil, nil)
	clusterLagSecondsDesc = prometheus.NewDesc(namespace+"_cluster_lag_seconds",
		"On a node that does not lead: how long an entry the leader committed has waited here unapplied; 0 on the leader.", nil, nil)
	clusterBehindDesc = prometheus.NewDesc(namespace+"_cluster_behind",
		"1 while this node is too far behind its leader to be ready (an entry committed over the bound ago unapplied, or no leader heard for as long), else 0.", nil, nil)
	clusterPeerUpDesc = prometheus.NewDesc(namespace+"_cluster_peer_answered",
		"On the leader: 1 if the member answered CLUSTER.STATUS at the scrape, else 0.", []string{"peer"}, nil)
)

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterRoleDesc, clusterTermDesc, clusterCommitDesc, clusterAppliedDesc, clusterPeerAppliedDesc, clusterLagDesc, clusterPeerUpDesc,
		clusterLagEntriesDesc, clusterLagSecondsDesc, clusterBehindDesc} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.cluster.Status()
	for _, role := range []string{wire.RoleLeader, wire.RoleFollower, wire.RoleCandidate, wire.RoleShutdown} {
		v := 0.0
		if st.Role == role {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(clusterRoleDesc, prometheus.GaugeValue, v, role)
	}
	ch <- prometheus.MustNewConstMetric(clusterTermDesc, prometheus.GaugeValue, float64(st.Term))
	ch <- prometheus.MustNewConstMetric(clusterCommitDesc, prometheus.GaugeValue, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(clusterAppliedDesc, prometheus.GaugeValue, float64(st.AppliedIndex))
	behind := 0.0
	if st.Behind != "" {
		behind = 1
	}
	ch <- prometheus.MustNewConstMetric(clusterLagEntriesDesc, prometheus.GaugeValue, float64(st.LagEntries))
	ch <- prometheus.MustNewConstMetric(clusterLagSecondsDesc, prometheus.GaugeValue, st.LagSeconds)
	ch <- prometheus.MustNewConstMetric(clusterBehindDesc, prometheus.GaugeValue, behind)
	if st.Role != wire.RoleLeader {
		return
	}
	for _, p := range c.s.clusterInfo().Peers {
		up := 0.0
		if p.Answered {
			up = 1
			ch <- prometheus.MustNewConstMetric(clusterPeerAppliedDesc, prometheus.GaugeValue, float64(p.AppliedIndex), p.ID)
			ch <- prometheus.MustNewConstMetric(clusterLagDesc, prometheus.GaugeValue, float64(*p.Lag), p.ID)
		}
		ch <- prometheus.MustNewConstMetric(clusterPeerUpDesc, prometheus.GaugeValue, up, p.ID)
	}
}
