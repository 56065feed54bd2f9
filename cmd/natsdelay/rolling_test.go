package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore/engine"
)

// previousRelease is the last build before this release's work: a
// rolling upgrade of a cluster (docs/upgrading.md) starts from it.
const previousRelease = "6142a3d"

// rollWait bounds every wait of the rolling upgrade: a node of the race
// build starting on a loaded machine, a leader handing over, a message
// going out. A passing test waits far less.
const rollWait = 90 * time.Second

// TestCluster_RollingUpgrade_FromPreviousRelease follows docs/upgrading.md's
// "A rolling upgrade of a cluster" from the previous release to this one:
// three nodes of the previous release, each a process with its Raft port
// on loopback TCP, over one nats-server; messages scheduled before the
// roll, due during it and after it, a recurring schedule and a message
// with a Delay-Id, with a consumer ACKing; then each follower in turn
// stopped with SIGTERM, started as this version on its data dir with the
// same flags, and waited for until its /readyz says "ok: follower"; then
// the leader, whose SIGTERM hands its leadership over. A publisher keeps
// scheduling throughout, sending again with the same Delay-Id after a 503
// or a timeout. It checks that every message a reply accepted is
// delivered, at or after its fire time by the service's own delivered
// events, under the tag and fire time the reply gave; that the Delay-Id
// message sent again during and after the roll is one message; that the
// schedule's occurrences go on under the new leader, one tag each; and at
// the end that the three nodes of this version agree on one leader and,
// stopped, each hold a store at index-version 5 with the version guard.
func TestCluster_RollingUpgrade_FromPreviousRelease(t *testing.T) {
	t.Parallel()
	older := buildOlder(t, previousRelease)
	began := time.Now()

	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	c := newRollCluster(t, ns.ClientURL(), 3)
	c.startAll(t, older)

	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := watchDeliveries(t, nc)
	leader := c.waitLeader(t)
	t.Logf("three nodes of %s up, leader %s, in %v", previousRelease, leader.id, time.Since(began).Round(time.Millisecond))

	// Before the roll: messages due during it and after it, the Delay-Id
	// message, and a schedule every second.
	var before []rollReply
	for i := range 20 {
		r := mustSchedule(t, nc, "roll.before", fmt.Sprintf("before-%d", i), nats.Header{"Delay": {fmt.Sprintf("%dms", 500+i*1500)}})
		before = append(before, r)
	}
	for i := range 5 {
		r := mustSchedule(t, nc, "roll.after", fmt.Sprintf("after-%d", i), nats.Header{"Delay": {fmt.Sprintf("%ds", 50+i)}})
		before = append(before, r)
	}
	onceHdr := nats.Header{"Delay": {"25s"}, "X-Body": {"once"}}
	once := []rollReply{mustSchedule(t, nc, "roll.once", "once", onceHdr)}
	tick := mustSchedule(t, nc, "roll.tick", "tick", nats.Header{"Delay-Every": {"1s"}})

	pub := startRollPublisher(nc)
	defer pub.halt()
	pub.waitAccepted(t, 5)

	// The roll, as docs/upgrading.md says: every follower, then the leader.
	for _, n := range c.nodes {
		if n == leader {
			continue
		}
		c.upgrade(t, n, os.Args[0])
		if l := c.waitLeader(t); l != leader {
			t.Fatalf("upgrading follower %s moved the leadership from %s to %s", n.id, leader.id, l.id)
		}
		once = append(once, mustSchedule(t, nc, "roll.once", "once", onceHdr))
	}
	c.upgrade(t, leader, os.Args[0])
	if !strings.Contains(leader.stopped, "cluster leadership handed over") {
		t.Errorf("the leader's SIGTERM did not hand its leadership over; it logged:\n%s", leader.stopped)
	}
	newLeader := c.waitLeader(t)
	rolled := time.Now()
	t.Logf("rolled to this version in %v; leader %s", rolled.Sub(began).Round(time.Millisecond), newLeader.id)

	// This version leads: ingest goes on, and the Delay-Id message sent
	// again is still one message.
	n := pub.count()
	pub.waitAccepted(t, n+5)
	pub.halt()
	if err := pub.failed(); err != nil {
		t.Fatal(err)
	}
	once = append(once, mustSchedule(t, nc, "roll.once", "once", onceHdr))
	during := pub.replies()
	t.Logf("the publisher had %d messages accepted during the roll, after %d retries", len(during), pub.retries())

	all := append(append(before, during...), once[len(once)-1])
	w.waitDelivered(t, all)
	w.waitOccurrencesAfter(t, rolled, 2)
	w.check(t, all, once, tick)

	st := clusterStatus(t, nc, len(c.nodes))
	leaders := 0
	for id, s := range st {
		if s.Role == "leader" {
			leaders++
		}
		if s.LeaderID != newLeader.id {
			t.Errorf("node %s names leader %q, want %s", id, s.LeaderID, newLeader.id)
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders among %v, want 1", leaders, st)
	}

	// Stopped, each node's store is at this version's index-version, with
	// the version guard: the new leader's open upgraded the replicated
	// store, and every node applied it.
	for _, n := range c.nodes {
		n.stop(t)
	}
	for _, n := range c.nodes {
		checkStoreVersion(t, n)
	}
	t.Logf("rolling upgrade test took %v", time.Since(began).Round(time.Millisecond))
}

// rollNode is one node of the cluster being upgraded.
type rollNode struct {
	id, dir, raft, http string
	proc                *proc
	stopped             string // what its last stopped process logged
}

// rollCluster is a cluster of natsdelay serve processes over one NATS
// server, of whichever build each node runs.
type rollCluster struct {
	url   string
	nodes []*rollNode
}

func newRollCluster(t *testing.T, url string, n int) *rollCluster {
	c := &rollCluster{url: url}
	for i := range n {
		c.nodes = append(c.nodes, &rollNode{id: fmt.Sprintf("node%c", 'a'+i), dir: t.TempDir(), raft: freeAddr(t), http: freeAddr(t)})
	}
	return c
}

// args are a node's serve flags, the same for every build: the previous
// release's flags, which this version keeps.
func (c *rollCluster) args(n *rollNode) []string {
	var peers []string
	for _, p := range c.nodes {
		peers = append(peers, p.raft)
	}
	return []string{"serve", "--nats", c.url, "--data-dir", n.dir, "--engine", "pebble", "--http", n.http,
		"--cluster-listen", n.raft, "--cluster-peers", strings.Join(peers, ","), "--node-id", n.id,
		"--cluster-timeout", "2s", "--ack-wait", "2s", "--events"}
}

// startAll starts every node on bin at once (a fresh cluster bootstraps
// once every peer answers) and waits until each is ready.
func (c *rollCluster) startAll(t *testing.T, bin string) {
	for _, n := range c.nodes {
		n.proc = startExe(t, bin, nil, "", c.args(n)...)
	}
	for _, n := range c.nodes {
		n.waitReady(t, "ok: ")
	}
}

// upgrade stops n with SIGTERM, starts bin on its data dir with the same
// flags, and waits until its /readyz says it is a follower that caught up.
func (c *rollCluster) upgrade(t *testing.T, n *rollNode, bin string) {
	t.Helper()
	n.stop(t)
	n.proc = startExe(t, bin, nil, "", c.args(n)...)
	n.waitReady(t, "ok: follower")
}

// stop stops n's process with SIGTERM and checks that it exits with 0.
func (n *rollNode) stop(t *testing.T) {
	t.Helper()
	n.proc.signal(t, syscall.SIGTERM)
	if code := n.proc.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("node %s: exit code %d after SIGTERM, want 0", n.id, code)
	}
	n.stopped = n.proc.stderr.String()
}

// get asks n's HTTP listener for path, and returns the status code and
// the body; 0 when it does not answer.
func (n *rollNode) get(path string) (int, string) {
	client := http.Client{Timeout: 5 * time.Second}
	res, err := client.Get("http://" + n.http + path)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

// waitReady waits until n's /readyz answers 200 with a body starting with
// want.
func (n *rollNode) waitReady(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(rollWait)
	var code int
	var body string
	for time.Now().Before(deadline) {
		select {
		case <-n.proc.done:
			t.Fatalf("node %s exited (code %d) before it was ready", n.id, n.proc.cmd.ProcessState.ExitCode())
		default:
		}
		if code, body = n.get("/readyz"); code == http.StatusOK && strings.HasPrefix(body, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node %s: /readyz answered %d %q for %v, want 200 %q", n.id, code, body, rollWait, want)
}

// waitLeader waits until exactly one node's /leader answers 200, and
// returns it.
func (c *rollCluster) waitLeader(t *testing.T) *rollNode {
	t.Helper()
	deadline := time.Now().Add(rollWait)
	for time.Now().Before(deadline) {
		var leaders []*rollNode
		for _, n := range c.nodes {
			if code, _ := n.get("/leader"); code == http.StatusOK {
				leaders = append(leaders, n)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no single leader within %v", rollWait)
	return nil
}

// rollReply is a reply that accepted a message.
type rollReply struct {
	Tag       string    `json:"tag"`
	Subject   string    `json:"subject"`
	FireAt    time.Time `json:"fire_at"`
	Duplicate bool      `json:"duplicate"`
	id        string
}

// errRetry is an answer after which a publisher sends the same message
// again: a timeout, no responders while the leadership moves, a 503.
var errRetry = errors.New("no answer yet")

// scheduleOnce sends one message to subject with Delay-Id id and the
// headers hdr, and returns the reply that accepted it, or errRetry.
func scheduleOnce(nc *nats.Conn, subject, id string, hdr nats.Header) (rollReply, error) {
	m := nats.NewMsg("delay." + subject)
	for k, v := range hdr {
		m.Header[k] = v
	}
	m.Header.Set("Delay-Id", id)
	m.Data = []byte(id)
	res, err := nc.RequestMsg(m, 3*time.Second)
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		return rollReply{}, errRetry
	}
	if err != nil {
		return rollReply{}, err
	}
	switch code := res.Header.Get(wire.HeaderServiceErrorCode); code {
	case "":
	case "503":
		return rollReply{}, errRetry
	default:
		return rollReply{}, fmt.Errorf("schedule %s %s: error %s %s", subject, id, code, res.Header.Get("Nats-Service-Error"))
	}
	var r rollReply
	if err := json.Unmarshal(res.Data, &r); err != nil || r.Tag == "" {
		return rollReply{}, fmt.Errorf("schedule %s %s: reply %q: %v", subject, id, res.Data, err)
	}
	r.id = id
	return r, nil
}

// scheduleRetrying sends the message until a reply accepts it, within
// rollWait, and returns that reply and how many times it sent it again.
func scheduleRetrying(nc *nats.Conn, subject, id string, hdr nats.Header) (rollReply, int, error) {
	deadline := time.Now().Add(rollWait)
	for tries := 0; ; tries++ {
		r, err := scheduleOnce(nc, subject, id, hdr)
		if !errors.Is(err, errRetry) {
			return r, tries, err
		}
		if time.Now().After(deadline) {
			return r, tries, fmt.Errorf("schedule %s %s: no reply accepted it within %v", subject, id, rollWait)
		}
		// NB: no responders answers at once; a pause keeps the retries
		// from spinning while the leadership moves.
		time.Sleep(50 * time.Millisecond)
	}
}

func mustSchedule(t *testing.T, nc *nats.Conn, subject, id string, hdr nats.Header) rollReply {
	t.Helper()
	r, _, err := scheduleRetrying(nc, subject, id, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// rollPublisher schedules a message every 50 ms until it is halted, each
// with its own Delay-Id, due 8 to 12 s later: each is sent again after a
// 503 or a timeout until a reply accepts it, so that no message sent is
// lost and none is stored twice.
type rollPublisher struct {
	stop     chan struct{}
	done     chan struct{}
	haltOnce sync.Once

	mu       sync.Mutex
	accepted []rollReply
	resent   int
	err      error
	changed  chan struct{} // closed and replaced at each accepted message
}

func startRollPublisher(nc *nats.Conn) *rollPublisher {
	p := &rollPublisher{stop: make(chan struct{}), done: make(chan struct{}), changed: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			r, tries, err := scheduleRetrying(nc, "roll.during", fmt.Sprintf("during-%d", i), nats.Header{"Delay": {fmt.Sprintf("%ds", 8+i%5)}})
			p.mu.Lock()
			p.resent += tries
			if err != nil {
				p.err = err
				p.mu.Unlock()
				return
			}
			p.accepted = append(p.accepted, r)
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	return p
}

// halt stops the publisher and waits for it.
func (p *rollPublisher) halt() {
	p.haltOnce.Do(func() { close(p.stop) })
	<-p.done
}

func (p *rollPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.accepted)
}

func (p *rollPublisher) retries() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resent
}

func (p *rollPublisher) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *rollPublisher) replies() []rollReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]rollReply(nil), p.accepted...)
}

// waitAccepted waits until the publisher had n messages accepted.
func (p *rollPublisher) waitAccepted(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(rollWait)
	for {
		p.mu.Lock()
		got, changed, err := len(p.accepted), p.changed, p.err
		p.mu.Unlock()
		switch {
		case got >= n:
			return
		case err != nil:
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-p.done:
			if p.failed() == nil {
				t.Fatalf("the publisher stopped after %d messages, want %d", got, n)
			}
		case <-timeout:
			t.Fatalf("the publisher had %d messages accepted in %v, want %d", got, rollWait, n)
		}
	}
}

// rollDelivery is a delivery the consumer took.
type rollDelivery struct {
	subject, tag, id, fireAt, occurrence, attempt string
}

// deliveredEvent is the service's delivered event: when it delivered
// (At) and the fire time it delivered for.
type deliveredEvent struct {
	Tag    string    `json:"tag"`
	FireAt time.Time `json:"fire_at"`
	At     time.Time `json:"at"`
}

// rollWatch is the consumer, which ACKs every delivery, and the watcher
// of the service's delivered events.
type rollWatch struct {
	mu         sync.Mutex
	deliveries []rollDelivery
	events     []deliveredEvent
	changed    chan struct{} // closed and replaced at each delivery or event
}

func watchDeliveries(t *testing.T, nc *nats.Conn) *rollWatch {
	w := &rollWatch{changed: make(chan struct{})}
	sub, err := nc.Subscribe("roll.>", func(m *nats.Msg) {
		d := rollDelivery{subject: m.Subject, tag: m.Header.Get(wire.HeaderTag), id: m.Header.Get("Delay-Id"),
			fireAt: m.Header.Get(wire.HeaderFireAt), occurrence: m.Header.Get(wire.HeaderOccurrence), attempt: m.Header.Get("Delay-Attempt")}
		_ = m.Respond(nil)
		w.mu.Lock()
		w.deliveries = append(w.deliveries, d)
		w.notify()
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	events, err := nc.Subscribe("$DELAY.EVENT.delivered.roll.>", func(m *nats.Msg) {
		var e deliveredEvent
		if json.Unmarshal(m.Data, &e) != nil {
			e.Tag = "unreadable: " + string(m.Data)
		}
		w.mu.Lock()
		w.events = append(w.events, e)
		w.notify()
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sub.Unsubscribe()
		_ = events.Unsubscribe()
	})
	return w
}

// notify wakes the waiters. w.mu must be held.
func (w *rollWatch) notify() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitFor waits until done, called with w.mu held, says so, and fails
// after rollWait with what it says is missing.
func (w *rollWatch) waitFor(t *testing.T, done func() (bool, string)) {
	t.Helper()
	timeout := time.After(rollWait)
	for {
		w.mu.Lock()
		ok, missing := done()
		changed := w.changed
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("after %v: %s", rollWait, missing)
		}
	}
}

// waitDelivered waits until every reply's tag was delivered and the
// service told its delivered event.
func (w *rollWatch) waitDelivered(t *testing.T, replies []rollReply) {
	t.Helper()
	w.waitFor(t, func() (bool, string) {
		delivered, told := map[string]bool{}, map[string]bool{}
		for _, d := range w.deliveries {
			delivered[d.tag] = true
		}
		for _, e := range w.events {
			told[e.Tag] = true
		}
		var missing []string
		for _, r := range replies {
			if !delivered[r.Tag] || !told[r.Tag] {
				missing = append(missing, fmt.Sprintf("%s %s (delivered %v, event %v)", r.Subject, r.id, delivered[r.Tag], told[r.Tag]))
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d accepted messages not delivered: %v", len(missing), len(replies), missing[:min(len(missing), 10)])
	})
}

// waitOccurrencesAfter waits for n occurrences of the schedule planned
// after since.
func (w *rollWatch) waitOccurrencesAfter(t *testing.T, since time.Time, n int) {
	t.Helper()
	w.waitFor(t, func() (bool, string) {
		seen := map[string]bool{}
		for _, d := range w.deliveries {
			if at, err := time.Parse(time.RFC3339Nano, d.occurrence); err == nil && at.After(since) {
				seen[d.occurrence] = true
			}
		}
		return len(seen) >= n, fmt.Sprintf("%d occurrences planned after the roll, want %d", len(seen), n)
	})
}

// check checks what was delivered: each accepted message under the fire
// time its reply gave, never before it by the service's delivered events;
// the Delay-Id message under one tag, the last reply's, and every reply
// to it naming a pending message; each occurrence of the schedule under
// one tag.
func (w *rollWatch) check(t *testing.T, replies, once []rollReply, tick rollReply) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.At.Before(e.FireAt) {
			t.Errorf("delivered early: event %+v", e)
		}
	}
	byTag := map[string][]rollDelivery{}
	for _, d := range w.deliveries {
		byTag[d.tag] = append(byTag[d.tag], d)
	}
	for _, r := range replies {
		for _, d := range byTag[r.Tag] {
			if at, err := time.Parse(time.RFC3339Nano, d.fireAt); err != nil || !at.Equal(r.FireAt.Truncate(time.Millisecond)) {
				t.Errorf("%s %s delivered with Delay-Fire-At %q, its reply said %v", r.Subject, r.id, d.fireAt, r.FireAt)
			}
		}
	}
	onceTags := map[string]int{}
	for _, d := range w.deliveries {
		if d.subject == "roll.once" {
			onceTags[d.tag]++
		}
	}
	if last := once[len(once)-1]; len(onceTags) != 1 || onceTags[last.Tag] == 0 {
		t.Errorf("the Delay-Id message was delivered under tags %v, want only %s, the last reply's (replies %+v)", onceTags, last.Tag, once)
	}
	duringTags := map[string]map[string]bool{}
	for _, d := range w.deliveries {
		if d.subject == "roll.during" {
			if duringTags[d.id] == nil {
				duringTags[d.id] = map[string]bool{}
			}
			duringTags[d.id][d.tag] = true
		}
	}
	for id, tags := range duringTags {
		if len(tags) != 1 {
			t.Errorf("%s delivered under %d tags, want 1, its sending again one message: %v", id, len(tags), tags)
		}
	}
	occurrences := map[string]map[string]bool{}
	for _, d := range w.deliveries {
		if d.subject != "roll.tick" {
			continue
		}
		if d.id != "tick" || d.occurrence == "" {
			t.Errorf("occurrence %+v: want Delay-Id tick and its Delay-Occurrence", d)
		}
		if occurrences[d.occurrence] == nil {
			occurrences[d.occurrence] = map[string]bool{}
		}
		occurrences[d.occurrence][d.tag] = true
	}
	for at, tags := range occurrences {
		if len(tags) != 1 {
			t.Errorf("occurrence planned at %s delivered under %d tags, want 1: %v", at, len(tags), tags)
		}
	}
	redelivered := 0
	for _, ds := range byTag {
		redelivered += len(ds) - 1
	}
	t.Logf("%d deliveries of %d tags (%d again after a lost ACK or a leader change), %d occurrences of the schedule begun as %s, %d delivered events",
		len(w.deliveries), len(byTag), redelivered, len(occurrences), tick.Tag, len(w.events))
}

// clusterStatus asks every node for its status, as natsdelay cluster
// status does, until want answered.
func clusterStatus(t *testing.T, nc *nats.Conn, want int) map[string]wire.NodeStatus {
	t.Helper()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(wire.DefaultAPIPrefix+"."+wire.VerbClusterStatus, inbox, nil); err != nil {
		t.Fatal(err)
	}
	got := map[string]wire.NodeStatus{}
	for len(got) < want {
		m, err := sub.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("cluster status: %d of %d nodes answered: %v", len(got), want, err)
		}
		var st wire.NodeStatus
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatalf("cluster status answer %q: %v", m.Data, err)
		}
		got[st.ID] = st
	}
	return got
}

// checkStoreVersion opens the store of n, stopped, and checks that it is
// at this version's index-version, with the version guard.
func checkStoreVersion(t *testing.T, n *rollNode) {
	t.Helper()
	s, err := engine.Open(engine.Config{Engine: engine.Pebble, Dir: n.dir})
	if err != nil {
		t.Fatalf("node %s: open its store: %v", n.id, err)
	}
	defer s.Close()
	v, err := s.Get([]byte("metadata/event-repo/index-version"))
	if err != nil || len(v) != 8 || binary.BigEndian.Uint64(v) != 5 {
		t.Errorf("node %s: index-version %x (%v), want 5", n.id, v, err)
	}
	if _, err := s.Get([]byte("metadata/event-repo/topic/\x00written by a newer natsdelay; run that version or a later one")); err != nil {
		t.Errorf("node %s: the version guard: %v", n.id, err)
	}
}

// TestCluster_RollingUpgrade_OldLeaderAfterNewOne_ServesOnceRolled checks
// what docs/upgrading.md says of a roll out of order: once a node of this
// version has led, it has upgraded the replicated store to index-version
// 5 through the log, which every node applies, old ones too; a node of
// the previous release elected after it then refuses the store, as a
// downgrade is refused, and serves nothing while it leads (ingest gets no
// answer or a 503); the roll carried on as the docs say, the remaining
// old follower upgraded and the old leader last, brings the cluster back,
// with the message scheduled before delivered.
func TestCluster_RollingUpgrade_OldLeaderAfterNewOne_ServesOnceRolled(t *testing.T) {
	t.Parallel()
	older := buildOlder(t, previousRelease)
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	c := newRollCluster(t, ns.ClientURL(), 3)
	c.startAll(t, older)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w := watchDeliveries(t, nc)
	leader := c.waitLeader(t)
	kept := mustSchedule(t, nc, "roll.kept", "kept", nats.Header{"Delay": {"20s"}})

	// One follower to this version, then the leadership to it: the old
	// leader's SIGTERM hands it to the most up-to-date follower, the
	// first of equals in the configuration; should the old follower get
	// it, it is stopped in turn, until the new node leads.
	var upgraded, old *rollNode
	for _, n := range c.nodes {
		switch {
		case n == leader:
		case upgraded == nil:
			upgraded = n
		default:
			old = n
		}
	}
	c.upgrade(t, upgraded, os.Args[0])
	for range 5 {
		leader.stop(t)
		next := c.waitLeader(t)
		leader.proc = startExe(t, older, nil, "", c.args(leader)...)
		leader.waitReady(t, "ok: ")
		if next == upgraded {
			break
		}
		leader, old = next, leader
	}
	if l := c.waitLeader(t); l != upgraded {
		t.Fatalf("the leadership did not come to the upgraded node %s in 5 handovers (leader %s)", upgraded.id, l.id)
	}
	upgraded.waitReady(t, "ok: leader")
	mustSchedule(t, nc, "roll.kept", "new-leader", nats.Header{"Delay": {"1s"}})

	// The new node stops; an old one takes over and refuses the store.
	upgraded.stop(t)
	stuck := c.waitLeader(t)
	stuck.proc.waitLine(t, `index version 5 is newer than this version knows \(3\)`, rollWait)
	if code, body := stuck.get("/readyz"); code == http.StatusOK {
		t.Errorf("old leader %s on the upgraded store: /readyz %d %q, want it not ready", stuck.id, code, body)
	}
	if r, err := scheduleOnce(nc, "roll.kept", "refused", nil); !errors.Is(err, errRetry) {
		t.Errorf("old leader %s on the upgraded store accepted a message: %+v, %v", stuck.id, r, err)
	}
	t.Logf("old leader %s refused the store a new leader upgraded", stuck.id)

	// The roll goes on: the old follower, the stopped node, then the old leader.
	other := leader
	if stuck == leader {
		other = old
	}
	c.upgrade(t, other, os.Args[0])
	upgraded.proc = startExe(t, os.Args[0], nil, "", c.args(upgraded)...)
	upgraded.waitReady(t, "ok: follower")
	c.upgrade(t, stuck, os.Args[0])
	c.waitLeader(t).waitReady(t, "ok: leader")
	after := mustSchedule(t, nc, "roll.kept", "after", nats.Header{"Delay": {"1s"}})
	w.waitDelivered(t, []rollReply{kept, after})
	for _, n := range c.nodes {
		n.stop(t)
	}
	for _, n := range c.nodes {
		checkStoreVersion(t, n)
	}
}

// TestDocs_Upgrading_NamesTheRollingTests checks that docs/upgrading.md
// names the release the rolling upgrade is tested from, and the tests.
func TestDocs_Upgrading_NamesTheRollingTests(t *testing.T) {
	b, err := os.ReadFile("../../docs/upgrading.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"commit " + previousRelease, "`TestCluster_RollingUpgrade_FromPreviousRelease`", "`TestCluster_RollingUpgrade_OldLeaderAfterNewOne_ServesOnceRolled`"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("docs/upgrading.md does not name %s", want)
		}
	}
}
