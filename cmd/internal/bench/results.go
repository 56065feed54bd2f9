package bench

import "time"

// System names, as they appear in the table and the JSON.
const (
	SystemDelay = "natsdelay"
	SystemJS    = "jetstream"
	SystemCore  = "core-reqrep"
)

// Results is everything one run measured; it is what --json-out writes.
type Results struct {
	Host      Host             `json:"host"`
	Config    ConfigSummary    `json:"config"`
	Ingest    []IngestResult   `json:"ingest"`
	Fire      []FireResult     `json:"fire"`
	EndToEnd  []EndToEndResult `json:"end_to_end"`
	Scale     *ScaleResult     `json:"scale,omitempty"`
	Expiry    *ExpiryResult    `json:"expiry,omitempty"`
	Waves     *WavesResult     `json:"waves,omitempty"`
	Recurring *RecurringResult `json:"recurring,omitempty"`
	Cluster   *ClusterResult   `json:"cluster,omitempty"`
	Cells     *CellsResult     `json:"cells,omitempty"`
	Flow      *FlowResult      `json:"flow,omitempty"`
	Events    *EventsResult    `json:"events,omitempty"`
	Floor     *FloorResult     `json:"floor,omitempty"`
	StartedAt time.Time        `json:"started_at"`
	Seconds   float64          `json:"seconds"`

	// JetStreamSync is how the JetStream server syncs its file store, as
	// the embedded server reports it; nil with --nats, whose server's
	// setting the bench cannot see.
	JetStreamSync *JetStreamSync `json:"jetstream_sync,omitempty"`
}

// Host describes the machine the run was on.
type Host struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	GoVersion string `json:"go_version"`
	NATS      string `json:"nats_server"`
	Embedded  bool   `json:"embedded"`
	// LoadBefore and LoadAfter are the 1, 5 and 15 minute load averages
	// from /proc/loadavg: other work on the machine skews every figure.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	// StealPct is the share of CPU time the hypervisor gave to others
	// during the run (steal in /proc/stat), in percent; -1 where unknown.
	// On a shared VM it explains runs that are slow for both systems.
	StealPct float64 `json:"steal_pct"`
}

// JetStreamSync is the durability of JetStream's writes in a run.
// natsdelay's needs no field: it replies to a schedule only after the
// fsync of the batch that holds it, always.
type JetStreamSync struct {
	// Always is set when every write is fsynced before the server replies
	// (sync_interval: always, which --js-sync-always sets).
	Always bool `json:"always"`
	// Interval is how often the server fsyncs in the background otherwise,
	// as a Go duration: nats-server's default is 2m0s.
	Interval string `json:"interval"`
}

// ConfigSummary is the sizes of the run.
type ConfigSummary struct {
	PayloadSize    int       `json:"payload_size"`
	IngestMsgs     int       `json:"ingest_msgs"`
	Outstanding    int       `json:"outstanding"`
	Requesters     int       `json:"requesters"`
	FireMsgs       int       `json:"fire_msgs"`
	FireRates      []float64 `json:"fire_rates"`
	FireLeadMs     float64   `json:"fire_lead_ms"`
	FireRecurring  int       `json:"fire_recurring"`
	EndToEndMsgs   int       `json:"end_to_end_msgs"`
	ScalePending   int       `json:"scale_pending"`
	ScaleSubjects  int       `json:"scale_subjects"`
	ScaleDue       int       `json:"scale_due"`
	ScaleDueRuns   int       `json:"scale_due_runs"`
	ExpiredMsgs    int       `json:"expired_msgs"`
	ExpiryInterval string    `json:"expiry_interval"`
	Waves          int       `json:"waves"`
	WaveSubjects   int       `json:"wave_subjects"`
	RecurSchedules int       `json:"recur_schedules"`
	RecurEvery     string    `json:"recur_every"`
	RecurDuration  string    `json:"recur_duration"`
	RecurIdle      int       `json:"recur_idle"`
	RecurIdleFor   string    `json:"recur_idle_for"`
	JSSyncAlways   bool      `json:"js_sync_always"`
	// ServerProcess says the nats-server's CPU time was read from its own
	// process (Config.ServerPID); the CPU figures' Server fields hold it.
	ServerProcess bool `json:"nats_server_process"`
	// OwnProcess says natsdelay ran as its own process in ingest, fire and
	// end to end (Config.OwnProcess); their Service fields hold its CPU.
	OwnProcess bool     `json:"own_process"`
	Phases     []string `json:"phases"`
}

// IngestResult is one acknowledged-scheduling run.
type IngestResult struct {
	System  string  `json:"system"`
	Mode    string  `json:"mode"` // "pipelined" or "requesters"
	Msgs    int     `json:"msgs"`
	Failed  int     `json:"failed"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"msgs_per_s"`
	// CPU is over the run; natsdelay runs inside the bench process.
	CPU CPU `json:"cpu"`
}

// FireResult is one fire run: how late messages were delivered.
type FireResult struct {
	System      string  `json:"system"`
	OfferedRate float64 `json:"offered_rate"`
	Scheduled   int     `json:"scheduled"`
	Delivered   int     `json:"delivered"`
	Early       int     `json:"early"`
	// LeadMissed is set when ingest was still running at the first fire
	// time, so some messages were stored after they were due.
	LeadMissed bool    `json:"lead_missed"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// DeliveredRate is deliveries per second from the first to the last.
	DeliveredRate float64 `json:"delivered_per_s"`
	// Occurrences is how many occurrences of the FireRecurring schedules
	// natsdelay delivered from their start to the run's last delivery.
	Occurrences int64 `json:"recurring_delivered"`
	// CPU is from the first schedule until the last delivery, lead
	// included; natsdelay runs inside the bench process.
	CPU CPU `json:"cpu"`
	// LatenessMs is every lateness, sorted, for the chart.
	LatenessMs []float64 `json:"-"`
}

// EndToEndResult is sustained scheduling, delivery and ACK of due-now messages.
type EndToEndResult struct {
	System string `json:"system"`
	Msgs   int    `json:"msgs"`
	// Refused is how many of Msgs were answered with an error and so not
	// scheduled; only the cells phase counts them, the others fail.
	Refused   int     `json:"refused,omitempty"`
	Delivered int     `json:"delivered"`
	Seconds   float64 `json:"seconds"`
	Rate      float64 `json:"msgs_per_s"`
	// CPU is over the run; natsdelay runs inside the bench process.
	CPU CPU `json:"cpu"`
}

// ScaleResult is natsdelay with many pending future messages.
type ScaleResult struct {
	Pending int `json:"pending"`
	// Subjects is how many subjects the pending messages are spread over.
	Subjects int     `json:"subjects"`
	FillRate float64 `json:"fill_msgs_per_s"`
	// FillCPU is the CPU time of the fill.
	FillCPU CPU `json:"fill_cpu"`
	// MemEmpty and MemPending are natsdelay's memory before and after the
	// fill.
	MemEmpty   MemSample `json:"mem_before_fill"`
	MemPending MemSample `json:"mem_after_fill"`
	// OwnProcess tells whether natsdelay ran in a process of its own, so
	// the RSS figures are its alone, or in the bench process with the
	// nats-server and the clients.
	OwnProcess bool    `json:"own_process"`
	RSSBytes   int64   `json:"rss_bytes"`
	RSSPeak    int64   `json:"rss_peak_bytes"`
	RSSEmpty   int64   `json:"rss_bytes_before_fill"`
	DiskBytes  int64   `json:"disk_bytes"`
	RestartMs  float64 `json:"restart_to_first_delivery_ms"`
	// InfoEmptyMs and InfoMs are how long an INFO request took before
	// and after the fill, the slowest of three.
	InfoEmptyMs float64 `json:"info_ms_before_fill"`
	InfoMs      float64 `json:"info_ms"`
	// DueEmpty and DuePending are the due set's runs with the median
	// p99, before and after the fill; DueEmptyP99s and DuePendingP99s
	// every run's p99 in the order they ran.
	DueEmpty       FireResult `json:"due_with_none_pending"`
	DuePending     FireResult `json:"due_with_pending"`
	DueEmptyP99s   []float64  `json:"due_with_none_pending_p99s_ms"`
	DuePendingP99s []float64  `json:"due_with_pending_p99s_ms"`
	// SettleS is how long natsdelay took after the fill to become idle
	// (compactions done), before the due set was timed; -1 if it did not
	// within the limit.
	SettleS float64 `json:"settle_after_fill_s"`
}

// ExpiryResult is how fast the janitor removes expired messages.
type ExpiryResult struct {
	Pending int `json:"pending"`
	Expired int `json:"expired"`
	// InFlight is how many were delivered, unACKed, before they expired.
	InFlight int     `json:"in_flight_when_expired"`
	TTLMs    float64 `json:"ttl_ms"`
	// Ms is from the moment they expired until the last was removed.
	Ms float64 `json:"ms_after_expiry_until_removed"`
}

// MemSample is natsdelay's memory at one moment.
type MemSample struct {
	// RSSBytes is the resident set of natsdelay's process, or of the
	// bench process where natsdelay runs inside it; 0 where there is no
	// /proc.
	RSSBytes int64 `json:"rss_bytes"`
	// HeapBytes is natsdelay's live Go heap (go_memstats_heap_alloc_bytes
	// right after a collection the bench asks for); -1 where natsdelay
	// runs inside the bench process, whose heap is shared.
	HeapBytes int64 `json:"go_heap_bytes"`
	// DispatchSubjects is the natsdelay_dispatch_subjects gauge: the
	// subjects the dispatcher keeps state for. -1 where unknown.
	DispatchSubjects int64 `json:"dispatch_subjects"`
	// Releases is the natsdelay_memory_releases_total counter: how many
	// times natsdelay handed memory back once idle after a burst. -1
	// where unknown (in this process, or a version without it).
	Releases int64 `json:"memory_releases"`
	// Where the resident set lives, for natsdelay as its own process
	// (0 where unknown): RSSAnonBytes and RSSFileBytes split it into
	// anonymous memory and pages of files (the executable's, mostly);
	// GoHeldBytes is what Go's runtime holds from the system and has not
	// returned (go_memstats_sys_bytes less go_memstats_heap_released_bytes),
	// of it HeapInuseBytes in spans with live objects; anonymous memory
	// beyond GoHeldBytes is C's allocator: Pebble's memtables and block
	// cache.
	RSSAnonBytes   int64 `json:"rss_anon_bytes,omitempty"`
	RSSFileBytes   int64 `json:"rss_file_bytes,omitempty"`
	GoHeldBytes    int64 `json:"go_held_bytes,omitempty"`
	HeapInuseBytes int64 `json:"heap_inuse_bytes,omitempty"`
}

// WavesResult is natsdelay's memory over waves of subjects that come and
// go: does it return to what it was at idle?
type WavesResult struct {
	// Subjects is the number of subjects of each wave, one message each.
	Subjects int `json:"subjects_per_wave"`
	// OwnProcess is as in ScaleResult.
	OwnProcess bool `json:"own_process"`
	// Idle is the memory before the first wave.
	Idle  MemSample    `json:"idle"`
	Waves []WaveResult `json:"waves"`
}

// WaveResult is one wave: scheduled, delivered, ACKed and gone from the
// store, then natsdelay's memory.
type WaveResult struct {
	Seconds float64 `json:"seconds"`
	// Rate is the wave's messages over Seconds.
	Rate float64   `json:"msgs_per_s"`
	CPU  CPU       `json:"cpu"`
	Mem  MemSample `json:"mem_after"`
	// Released is the memory once natsdelay, idle after the wave, handed
	// memory back (natsdelay_memory_releases_total went up); nil where it
	// did not within the wave's wait (see releaseWait), or cannot tell.
	Released *MemSample `json:"mem_released,omitempty"`
}

// RecurringResult is recurring schedules in both systems, then natsdelay
// with many idle schedules.
type RecurringResult struct {
	// Schedules run every EveryMs, on a subject each, for WindowS seconds.
	Schedules int     `json:"schedules"`
	EveryMs   float64 `json:"every_ms"`
	WindowS   float64 `json:"window_s"`
	// GraceMs is how long after the window the run waited for the last
	// occurrences planned within it; any later is missed.
	GraceMs float64         `json:"grace_ms"`
	Systems []RecurLateness `json:"systems"`
	// P99Ratio is JetStream's lateness p99 over natsdelay's; 0 where
	// natsdelay's is 0.
	P99Ratio float64          `json:"jetstream_p99_over_natsdelay_p99"`
	Idle     *RecurIdleResult `json:"idle,omitempty"`
}

// RecurLateness is how one system kept the schedules' planned times.
type RecurLateness struct {
	System string `json:"system"`
	// Planned is the planned times within the window, over all schedules;
	// Delivered those that arrived, Missed those that never did.
	Planned   int `json:"planned"`
	Delivered int `json:"delivered"`
	Missed    int `json:"missed"`
	// Doubled counts planned times delivered under a second id (tag or
	// stream sequence), and deliveries of an id already ACKed.
	Doubled int `json:"doubled"`
	// Early counts planned times first delivered before they were due.
	Early int `json:"early"`
	// OffPlan counts planned times a delivery claimed that are not on
	// the schedule's plan (its start plus whole intervals).
	OffPlan int `json:"off_plan"`
	// Deliveries is every delivery seen, inside the window or after it;
	// Unreadable those whose headers could not be read.
	Deliveries int `json:"deliveries"`
	Unreadable int `json:"unreadable"`
	// Lateness of the first delivery of each planned time in the window:
	// receipt minus the planned time.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// LeadMissed is set when taking the schedules in ran past their first
	// planned time (natsdelay only: JetStream plans from when it stored
	// each schedule).
	LeadMissed bool `json:"lead_missed"`
	// CPU is from the first schedule until the end of the grace; natsdelay
	// runs inside the bench process.
	CPU CPU `json:"cpu"`
}

// RecurIdleResult is natsdelay with many schedules whose first occurrence
// is far away.
type RecurIdleResult struct {
	Schedules int    `json:"schedules"`
	Spec      string `json:"spec"`
	// OwnProcess is as in ScaleResult.
	OwnProcess bool      `json:"own_process"`
	MemBefore  MemSample `json:"mem_before"`
	MemAfter   MemSample `json:"mem_after"`
	// MemIdle is read once natsdelay, idle after taking the schedules
	// in, has handed memory back (natsdelay_memory_releases_total went
	// up); nil where it does not count its releases or did not release
	// within the wait.
	MemIdle    *MemSample `json:"mem_idle,omitempty"`
	RSSPeak    int64      `json:"rss_peak_bytes"`
	IngestRate float64    `json:"ingest_per_s"`
	IngestCPU  CPU        `json:"ingest_cpu"`
	// IdleCPU is the CPU time over IdleS seconds with nothing due.
	IdleS   float64 `json:"idle_s"`
	IdleCPU CPU     `json:"idle_cpu"`
	// RestartMs is from starting natsdelay again on the same data until
	// its API answers; PendingAfterRestart is what INFO then counts.
	RestartMs           float64 `json:"restart_ms"`
	PendingAfterRestart uint64  `json:"pending_after_restart"`
	// InfoMs is how long that INFO took: its counts by due window read
	// every subject, and the schedules are a subject each.
	InfoMs       float64   `json:"info_ms"`
	MemRestarted MemSample `json:"mem_after_restart"`
}
