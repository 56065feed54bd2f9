package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// fleetCells are the founding cells of the test fleets, and the
// partitions each owns.
var (
	fleetCells = []string{"a", "b", "c"}
	fleetSplit = fleet.Split(fleetCells, fleet.DefaultPartitions)
)

// fleetArgs are the serve flags of a founding cell of the test fleets.
func fleetArgs(cell string) []string {
	return []string{"--cell", cell, "--fleet-cells", strings.Join(fleetCells, ",")}
}

// ownerOf is the cell of the test fleets that owns subject.
func ownerOf(subject string) string {
	p := fleet.Partition(subject, fleet.DefaultPartitions)
	for cell, rs := range fleetSplit {
		if fleet.Contains(rs, p) {
			return cell
		}
	}
	return ""
}

// subjectOwnedBy returns the first subject prefix.<i> that cell owns.
func subjectOwnedBy(cell, prefix string) string {
	for i := 0; ; i++ {
		if s := fmt.Sprintf("%s.%d", prefix, i); ownerOf(s) == cell {
			return s
		}
	}
}

// fleetHeard returns a channel closed once every cell in cells has told
// the fleet its record twice: by then every serving node of the fleet has
// heard each of them at least once, and routes to them.
func fleetHeard(t *testing.T, nc *nats.Conn, cells []string) <-chan struct{} {
	t.Helper()
	heard := map[string]int{}
	done := make(chan struct{})
	var mu sync.Mutex
	sub, err := nc.Subscribe(fleet.AliveSubject, func(m *nats.Msg) {
		var st fleet.Status
		if json.Unmarshal(m.Data, &st) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		heard[st.Cell]++
		for _, c := range cells {
			if heard[c] < 2 {
				return
			}
		}
		select {
		case <-done:
		default:
			close(done)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return done
}

// startCells starts each of cells as a single-node cell, a real process
// on the NATS server at url with the serve flags args gives it and env,
// and waits until each has told the fleet its record (heard on nc). It
// returns the processes by cell; the test's cleanup stops them.
func startCells(t *testing.T, bin string, nc *nats.Conn, url string, cells []string, args func(cell string) []string, env ...string) map[string]*serviceProcess {
	t.Helper()
	heard := fleetHeard(t, nc, cells)
	procs := map[string]*serviceProcess{}
	for _, c := range cells {
		p := launch(t, bin, append([]string{"NATSDELAY_HTTP="}, env...),
			append([]string{"serve", "--nats", url, "--data-dir", t.TempDir(), "--engine", "pebble", "--ack-wait", "1s"}, args(c)...)...)
		procs[c] = p
		t.Cleanup(func() { p.stop(t) })
	}
	waitClosed(t, heard, "every cell's record")
	return procs
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// fleetSize is the messages and subjects of the fleet test: a quick size
// in make test, the in make soak.
func fleetSize() (msgs, subjects int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 10000, 1000
	}
	return 2000, 200
}

// TestFleet_ThreeCells runs a fleet of three single-node cells, each a
// real process, on one nats-server, and checks what publishers, consumers
// and API clients see through it.
func TestFleet_ThreeCells(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	start := time.Now()
	startCells(t, bin, nc, srv.ClientURL(), fleetCells, fleetArgs)
	t.Logf("three cells serving in %v", time.Since(start))

	t.Run("PublishersUnchanged_EachDeliveredOnceInOrderByItsOwner", func(t *testing.T) { fleetDeliversOnce(t, nc) })
	t.Run("Pipelined_BatchedForwards_EachAnsweredAndDeliveredOnce", func(t *testing.T) { fleetPipelined(t, nc) })
	t.Run("GetCancel_ByTagAndByID_ThroughAnyNode", func(t *testing.T) { fleetGetCancel(t, nc) })
	t.Run("StaleForward_SenderToldAndMessageGoesOnToTheOwner", func(t *testing.T) { fleetStaleForward(t, nc) })
	t.Run("Subjects_MergedAcrossCellsInPages", func(t *testing.T) { fleetSubjects(t, nc) })
	t.Run("Info_SumsTheCells", func(t *testing.T) { fleetInfo(t, nc) })
	t.Run("CellsCommand_ListsEachCellsPartitions", func(t *testing.T) { fleetCellsCommand(t, bin, srv.ClientURL()) })
	t.Run("Limits_WrittenToEveryCell_ReadsNameCellsThatDiffer", func(t *testing.T) { fleetLimits(t, nc) })
	t.Run("Schedules_MergedAcrossCellsInPages", func(t *testing.T) { fleetSchedules(t, nc) })
	t.Run("DeadList_MergedInKeyOrder_FleetCursor", func(t *testing.T) { fleetDeadList(t, nc) })
	t.Run("Bulk_StepsOnEveryCell_FleetCursor_RetryMovesOnce", func(t *testing.T) { fleetBulk(t, nc) })
	t.Run("AdminCommands_AgainstTheFleet", func(t *testing.T) { fleetCLI(t, nc, bin, srv.ClientURL()) })
	// Last: it adds a cell to the fleet for good.
	t.Run("LimitWrite_ACellRefuses_NamedAndRetrySafe", func(t *testing.T) { fleetLimitWriteCellFails(t, nc) })
}

// fleetCellsCommand checks that natsdelay cells lists each cell with the
// partitions it owns, as ranges, and the node that serves it.
func fleetCellsCommand(t *testing.T, bin, url string) {
	code, out := runCLI(t, bin, "cells", "--nats", url, "--wait", "500ms")
	if code != 0 {
		t.Fatalf("natsdelay cells: exit %d:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("natsdelay cells: want a header and three cells:\n%s", out)
	}
	for i, cell := range fleetCells {
		f := strings.Fields(lines[i+1])
		want := []string{cell, cell, fleet.FormatRanges(fleetSplit[cell]), strconv.Itoa(fleet.Count(fleetSplit[cell])), "of", "256", "1"}
		if len(f) < len(want) || strings.Join(f[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("natsdelay cells, cell %s: %q, want it to begin %q", cell, lines[i+1], strings.Join(want, " "))
		}
	}
}

// fleetDelivery is one delivery the fleet test's consumer took.
type fleetDelivery struct {
	subject, reply string
	seq, attempt   int
}

// fleetDeliversOnce publishes with plain requests to delay.<subject>,
// each subject's messages one after another, and a plain subscriber ACKs
// each delivery: every message must come once, in order per subject, from
// the cell that owns its subject.
func fleetDeliversOnce(t *testing.T, nc *nats.Conn) {
	total, nSubjects := fleetSize()
	per := total / nSubjects
	got := make(chan fleetDelivery, total+100)
	sub, err := nc.Subscribe("fleet.once.>", func(m *nats.Msg) {
		seq, _ := strconv.Atoi(string(m.Data))
		a, _ := strconv.Atoi(m.Header.Get(wire.HeaderAttempt))
		got <- fleetDelivery{subject: m.Subject, reply: m.Reply, seq: seq, attempt: a}
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	publishFleet(t, nc, nSubjects, per)
	t.Logf("%d messages on %d subjects published through the fleet in %v", total, nSubjects, time.Since(start))

	last := map[string]int{}
	for n := 0; n < total; n++ {
		var d fleetDelivery
		select {
		case d = <-got:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d delivered", n, total)
		}
		if d.attempt != 1 {
			t.Errorf("%s #%d: attempt %d, want 1: redelivered with a prompt ACKer", d.subject, d.seq, d.attempt)
		}
		if d.seq != last[d.subject]+1 {
			t.Errorf("%s: #%d after #%d: want each once, in publish order", d.subject, d.seq, last[d.subject])
		}
		last[d.subject] = d.seq
		owner := ownerOf(d.subject)
		if _, ack, _ := fleet.CellSubjects(owner); !strings.HasPrefix(d.reply, ack+".") {
			t.Errorf("%s: delivered with reply %q, want one of its owner %s (%s.<tag>)", d.subject, d.reply, owner, ack)
		}
	}
	select {
	case d := <-got:
		t.Errorf("a delivery more than the %d published: %s #%d attempt %d", total, d.subject, d.seq, d.attempt)
	case <-time.After(1500 * time.Millisecond): // past the ack wait of 1s: a redelivery would show
	}
	t.Logf("%d delivered once each, in order, each by its subject's owner, %v after the first publish", total, time.Since(start))
}

// delivery is what a consumer of the fleet tests saw: the subject and
// payload, and the attempt.
type delivery struct{ what, attempt string }

// fleetPipelined publishes 3,000 messages without waiting for their
// answers, each with a reply subject of its own, so that the nodes take
// them in bursts and forward to each owner in batches (one NATS message
// holding many publishes): every publisher must be answered with the
// tag of its message by its owner, and every message delivered, none
// twice in one attempt. A second attempt is at-least-once's redelivery of
// a delivery whose ACK came after the cells' ack wait of 1s, which a
// loaded machine can make happen; it is logged, not failed.
func fleetPipelined(t *testing.T, nc *nats.Conn) {
	const n, nSubjects = 3000, 100
	got := make(chan delivery, 2*n)
	sub, err := nc.Subscribe("fleet.pipe.>", func(m *nats.Msg) {
		got <- delivery{what: m.Subject + " " + string(m.Data), attempt: m.Header.Get(wire.HeaderAttempt)}
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	answers := make(chan *nats.Msg, n)
	inbox := nats.NewInbox()
	asub, err := nc.ChanSubscribe(inbox+".*", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer asub.Unsubscribe()
	batches := make(chan *nats.Msg, n)
	bsub, err := nc.ChanSubscribe(fleet.CellPrefix+".*.FWD.*", batches)
	if err != nil {
		t.Fatal(err)
	}
	defer bsub.Unsubscribe()
	for i := range n {
		m := newMsg(fmt.Sprintf("fleet.pipe.%d", i%nSubjects), strconv.Itoa(i), wire.HeaderDelay, "500ms")
		m.Reply = fmt.Sprintf("%s.%d", inbox, i)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		var a *nats.Msg
		select {
		case a = <-answers:
		case <-time.After(30 * time.Second):
			t.Fatalf("a publisher was not answered")
		}
		var r wire.ScheduleReply
		if err := wire.ParseError(a.Header, a.Data); err != nil {
			t.Fatalf("%s: %v", a.Subject, err)
		}
		if err := json.Unmarshal(a.Data, &r); err != nil || r.Tag == "" {
			t.Fatalf("%s answered %q: %v", a.Subject, a.Data, err)
		}
		i, _ := strconv.Atoi(a.Subject[len(inbox)+1:])
		subject := fmt.Sprintf("fleet.pipe.%d", i%nSubjects)
		if p, err := fleet.TagPartition(r.Tag, fleet.DefaultPartitions); err != nil || p != fleet.Partition(subject, fleet.DefaultPartitions) {
			t.Fatalf("%s: tag %s is not of %s's partition", a.Subject, r.Tag, subject)
		}
	}
	seen, attempts := map[string]bool{}, map[delivery]bool{}
	redelivered := 0
	for len(seen) < n {
		select {
		case d := <-got:
			if attempts[d] {
				t.Fatalf("%s delivered twice in attempt %s", d.what, d.attempt)
			}
			attempts[d] = true
			if seen[d.what] {
				redelivered++
			}
			seen[d.what] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d delivered", len(seen), n)
		}
	}
	t.Logf("%d publishes answered and delivered (%d redelivered after the ack wait); the routers sent %d batches", n, redelivered, len(batches))
}

// publishFleet requests per messages on each of n subjects, from 32
// publishers that each own some subjects and send each subject's next
// message once the last one's reply came. A publisher sends a message
// again after a 503, as the protocol says a publisher may: while the
// fleet forms, a node that has not yet heard a partition's owner answers
// so, and a message sent again before the next keeps the subject's order.
func publishFleet(t *testing.T, nc *nats.Conn, n, per int) {
	const publishers = 32
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for w := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; seq <= per; seq++ {
				for s := w; s < n; s += publishers {
					m := nats.NewMsg(fmt.Sprintf("delay.fleet.once.%d", s))
					m.Data = []byte(strconv.Itoa(seq))
					err := requestRetryingUnavailable(nc, m)
					if err != nil {
						errs <- fmt.Errorf("%s #%d: %w", m.Subject, seq, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// fleetSchedule schedules a message for subject through the fleet, due in
// an hour, with the client id id, and returns its tag.
func fleetSchedule(t *testing.T, nc *nats.Conn, subject, id string) string {
	t.Helper()
	return schedule(t, nc, newMsg(subject, "later", wire.HeaderDelay, "1h", wire.HeaderID, id)).Tag
}

// fleetGetCancel checks that GET and CANCEL reach the cell that holds the
// message, by tag and by subject and id: each request is taken by any
// node of the fleet (a queue group), so each is sent six times over, and
// most reach a node that does not own the message.
func fleetGetCancel(t *testing.T, nc *nats.Conn) {
	ctx := context.Background()
	c := api(nc)
	for _, cell := range fleetCells {
		subject := subjectOwnedBy(cell, "fleet.get")
		tag := fleetSchedule(t, nc, subject, "x")
		for range 6 {
			info, err := c.Get(ctx, wire.MessageRef{Tag: tag})
			if err != nil || info.Subject != subject {
				t.Fatalf("GET %s (cell %s): %+v, %v", tag, cell, info, err)
			}
			if info, err = c.Get(ctx, wire.MessageRef{Subject: subject, ID: "x"}); err != nil || info.Tag != tag {
				t.Fatalf("GET %s id x (cell %s): %+v, %v", subject, cell, info, err)
			}
		}
		if err := c.Cancel(ctx, wire.MessageRef{Tag: tag}); err != nil {
			t.Fatalf("CANCEL %s (cell %s): %v", tag, cell, err)
		}
		if _, err := c.Get(ctx, wire.MessageRef{Tag: tag}); !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("GET %s after CANCEL: %v, want 404", tag, err)
		}
		tag = fleetSchedule(t, nc, subject, "y")
		if err := c.Cancel(ctx, wire.MessageRef{Subject: subject, ID: "y"}); err != nil {
			t.Fatalf("CANCEL %s id y (cell %s): %v", subject, cell, err)
		}
		if _, err := c.Get(ctx, wire.MessageRef{Tag: tag}); !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("GET %s after CANCEL by id: %v, want 404", tag, err)
		}
	}
	if _, err := c.Get(ctx, wire.MessageRef{Tag: "zz"}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("GET of a bad tag: %v, want 400", err)
	}
}

// fleetStaleForward plays a router whose map is stale: it forwards a
// message to cell a, which does not own its subject. a must tell the
// router, with its record, and send the message on to the owner, which
// answers the publisher; a message a receiver sent on already is not
// sent on again.
func fleetStaleForward(t *testing.T, nc *nats.Conn) {
	subject := subjectOwnedBy("b", "fleet.stale")
	notices := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(fleet.StalePrefix+".testrouter", notices)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m := newMsg(subject, "stale", wire.HeaderDelay, "1h")
	m.Subject = fleet.CellPrefix + ".a.FWD.testrouter." + subject
	r, err := nc.RequestMsg(m, wait)
	if err != nil {
		t.Fatal(err)
	}
	got := parseScheduled(t, r.Data)
	if got.Subject != subject {
		t.Fatalf("reply %+v, want one for %s", got, subject)
	}
	var notice fleet.Status
	select {
	case n := <-notices:
		if err := json.Unmarshal(n.Data, &notice); err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("no stale notice")
	}
	if notice.Cell != "a" || notice.Epoch != 1 || fleet.FormatRanges(notice.Owned) != fleet.FormatRanges(fleetSplit["a"]) {
		t.Fatalf("notice %+v, want cell a's record at epoch 1", notice)
	}
	info, err := api(nc).Get(context.Background(), wire.MessageRef{Tag: got.Tag})
	if err != nil || info.Subject != subject {
		t.Fatalf("GET of the message forwarded on: %+v, %v", info, err)
	}
	m.Subject = fleet.CellPrefix + ".a.FWD.~testrouter." + subject
	r, err = nc.RequestMsg(m, wait)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ParseError(r.Header, r.Data); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("a message sent on twice: %v, want 503", err)
	}
}

// fleetInfo checks that INFO through the fleet lists each cell and sums
// their counts.
func fleetInfo(t *testing.T, nc *nats.Conn) {
	r, err := nc.Request(wire.DefaultAPIPrefix+"."+wire.VerbInfo, nil, wait)
	if err != nil {
		t.Fatal(err)
	}
	var info fleet.Info
	if err := json.Unmarshal(r.Data, &info); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	var names []string
	for _, c := range info.Fleet.Cells {
		if c.Counts == nil {
			t.Fatalf("cell %s: no counts: %s", c.Cell, c.Error)
		}
		sum += c.Counts.Pending
		names = append(names, c.Cell)
	}
	if strings.Join(names, ",") != "a,b,c" || info.Fleet.Partitions != fleet.DefaultPartitions || info.Counts.Pending != sum || sum == 0 {
		t.Fatalf("INFO: cells %v, %d partitions, pending %d, cells' sum %d", names, info.Fleet.Partitions, info.Counts.Pending, sum)
	}
}

// TestFleet_CellWithoutQuorum_OnlyItsPartitionsStop runs cells a and b as
// single nodes and c as a cluster of three, then kills two of c's nodes:
// publishes to c's partitions must get a retryable 503 answer, not wait
// for a timeout, while a's and b's subjects are still taken and delivered.
func TestFleet_CellWithoutQuorum_OnlyItsPartitionsStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	startCells(t, bin, nc, srv.ClientURL(), fleetCells[:2], fleetArgs)
	heard := fleetHeard(t, nc, fleetCells[2:])
	cluster := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	cluster.extra = fleetArgs("c")
	cluster.startAll()
	waitClosed(t, heard, "cell c's record")
	onC := subjectOwnedBy("c", "fleet.quorum")
	// NB: retried: under load a cell may go unheard for a second (a 503).
	if err := requestRetryingUnavailable(nc, newMsg(onC, "before", wire.HeaderDelay, "1h")); err != nil {
		t.Fatal(err)
	}

	for _, n := range cluster.nodes[:2] {
		cluster.killKeepingLog(n)
	}
	// NB: a request the server hands a killed node before it notices the
	// kill is answered by nobody (see waitKilledClosed). Of the five nodes,
	// a's, b's and c's last are left.
	waitKilledClosed(t, srv, 3)
	// From the kill on, every publish to c's partitions is answered, and
	// with a 503 (some may still be stored while c's leader, if it is the
	// node left, holds its lease): never NATS's no-responders, never
	// silence. A publish reaches c's last node or a's or b's.
	answeredUnavailable(t, nc, onC, 40)
	for _, cell := range fleetCells[:2] {
		subject := subjectOwnedBy(cell, "fleet.quorum")
		ch := subscribe(t, nc, subject)
		schedule(t, nc, newMsg(subject, "while c has no quorum"))
		if r := next(t, ch, "a delivery of cell "+cell); string(r.Data) != "while c has no quorum" {
			t.Fatalf("cell %s delivered %q", cell, r.Data)
		}
	}
}

// answeredUnavailable publishes n messages to subject one after another:
// each must be answered within wait, OK or a 503, and the last one a 503
// (the fleet's, that the owner is silent or has no node serving it, or
// the cell's, that its node does not lead); a no-responders or a timeout
// fails the test.
func answeredUnavailable(t *testing.T, nc *nats.Conn, subject string, n int) {
	t.Helper()
	var last error
	for i := range n {
		start := time.Now()
		r, err := nc.RequestMsg(newMsg(subject, "without a leader", wire.HeaderDelay, "1h", wire.HeaderID, fmt.Sprintf("q%d", i)), wait)
		if err != nil {
			t.Fatalf("publish %d of %d to %s without a leader: %v after %v, want an answer", i+1, n, subject, err, time.Since(start))
		}
		last = wire.ParseError(r.Header, r.Data)
		if last != nil && !errors.Is(last, wire.ErrUnavailable) {
			t.Fatalf("publish %d of %d to %s without a leader: %v, want OK or a 503", i+1, n, subject, last)
		}
	}
	if !errors.Is(last, wire.ErrUnavailable) {
		t.Fatalf("the last publish to %s without a leader: %v, want a 503", subject, last)
	}
	t.Logf("the last publish to %s without a leader: %v", subject, last)
}

// TestFleet_ClusterCellAlone_WithoutLeader_Answers503 runs a fleet of one
// cell, a cluster of three, and kills two of its nodes: with no leader,
// every publish must still be answered, with a 503 from the node left,
// not with NATS's no-responders as a plain cluster's publishers get.
func TestFleet_ClusterCellAlone_WithoutLeader_Answers503(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	heard := fleetHeard(t, nc, []string{"c"})
	cluster := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	cluster.extra = []string{"--cell", "c", "--fleet-cells", "c"}
	cluster.startAll()
	waitClosed(t, heard, "cell c's record")
	_, _, cellAPI := fleet.CellSubjects("c")
	var leader string
	checkFor(t, 2*wait, 20*time.Millisecond, func() error {
		for id, st := range gatherStatusAt(nc, cellAPI, 300*time.Millisecond, 3) {
			if st.Role == wire.RoleLeader {
				leader = id
				return nil
			}
		}
		return errors.New("no node of cell c says it leads")
	})
	if err := requestRetryingUnavailable(nc, newMsg("fleet.alone.1", "before", wire.HeaderDelay, "1h")); err != nil {
		t.Fatal(err)
	}
	var killed int
	for _, n := range cluster.nodes {
		if killed < 2 && n.id != leader {
			cluster.killKeepingLog(n)
			killed++
		}
	}
	// NB: a request the server hands a killed node before it notices the
	// kill is answered by nobody (see waitKilledClosed): the ingest goes
	// out once the server holds only the connections of the node left.
	open := waitKilledClosed(t, srv, 1)
	t.Logf("connections of natsdelay open when the kills returned: %d, 1 of them the node left's", open)
	// The leader is left: it loses its lease, then its leadership.
	answeredUnavailable(t, nc, "fleet.alone.1", 40)
}

// fleetSubjects pages through SUBJECTS of 40 subjects spread over the
// cells, 7 at a time: each subject must come once, in subject order, with
// its count, and the last page must say there is no next.
func fleetSubjects(t *testing.T, nc *nats.Conn) {
	var want []string
	for i := range 40 {
		s := fmt.Sprintf("fleet.subj.%02d", i)
		want = append(want, s)
		for range 1 + i%3 {
			schedule(t, nc, newMsg(s, "later", wire.HeaderDelay, "1h"))
		}
	}
	var got []string
	after, pages := "", 0
	for {
		limit := 7
		page, err := api(nc).SubjectsPage(context.Background(), wire.SubjectsRequest{Filter: "fleet.subj.>", Limit: &limit, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range page.Subjects {
			var i int
			_, _ = fmt.Sscanf(s.Subject, "fleet.subj.%d", &i)
			if s.Pending != uint64(1+i%3) {
				t.Errorf("%s: %d pending, want %d", s.Subject, s.Pending, 1+i%3)
			}
			got = append(got, s.Subject)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || pages != 6 {
		t.Fatalf("%d pages of subjects %v, want 6 pages of %v", pages, got, want)
	}
}

// requestRetryingUnavailable sends m until its answer is not a 503, for
// up to wait, and returns the error of the last answer.
func requestRetryingUnavailable(nc *nats.Conn, m *nats.Msg) error {
	deadline := time.Now().Add(wait)
	for {
		r, err := nc.RequestMsg(m, 10*time.Second)
		if err == nil {
			err = wire.ParseError(r.Header, r.Data)
		}
		if !errors.Is(err, wire.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // NB: a retrying publisher's pause, not a wait for an event
	}
}
