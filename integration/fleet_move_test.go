package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// moveLoad is traffic through a fleet while its partitions move:
// publishers that send each message until one answer says it is stored
// (again after a 503, no responders or a timeout), and a consumer that
// ACKs every delivery and notes, per message, the cells that delivered
// it and whether any came before its fire time.
type moveLoad struct {
	prefix   string
	subjects int
	url      string

	mu        sync.Mutex
	acked     map[string]bool     // message id -> its publish was answered as stored
	tags      map[string]string   // message id -> the tag its answer gave
	delivered map[string][]string // message id -> the cells that delivered it, in order
	early     []string
	failed    []string // publishes refused for good
	acks      atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
}

// startMoveLoad starts publishers that publish on prefix.<0..subjects-1>
// through nc (delays up to 1.5s, some an hour, so that partitions move with
// messages due soon, due now and in flight) and a consumer on sub.
func startMoveLoad(t *testing.T, pub, sub *nats.Conn, prefix string, subjects, publishers int) *moveLoad {
	l := &moveLoad{prefix: prefix, subjects: subjects, acked: map[string]bool{}, tags: map[string]string{}, delivered: map[string][]string{}, stop: make(chan struct{})}
	l.url = sub.ConnectedUrl()
	s, err := sub.Subscribe(prefix+".>", l.onDelivery)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	for w := range publishers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.publish(pub, w, rand.New(rand.NewPCG(uint64(w), 7)))
		}()
	}
	t.Cleanup(func() {
		l.stopPublishers()
		_ = s.Unsubscribe()
	})
	return l
}

func (l *moveLoad) onDelivery(m *nats.Msg) {
	now := time.Now()
	fire, err := time.Parse(time.RFC3339Nano, m.Header.Get(wire.HeaderFireAt))
	cell := strings.TrimPrefix(m.Reply, fleet.CellPrefix+".")
	cell, _, _ = strings.Cut(cell, ".")
	id := string(m.Data)
	l.mu.Lock()
	// Delay-Fire-At is rounded down to the millisecond.
	if err != nil || now.Before(fire) {
		l.early = append(l.early, id)
	}
	l.delivered[id] = append(l.delivered[id], cell)
	l.mu.Unlock()
	_ = m.Respond(nil)
}

// publish sends messages w-0, w-1, ... until stopped.
func (l *moveLoad) publish(nc *nats.Conn, w int, r *rand.Rand) {
	for seq := 0; ; seq++ {
		id := fmt.Sprintf("%d-%d", w, seq)
		m := nats.NewMsg(fmt.Sprintf("delay.%s.%d", l.prefix, r.IntN(l.subjects)))
		m.Data = []byte(id)
		// NB: the id names the subject, so that a message missing names
		// its partition.
		id += "@" + strings.TrimPrefix(m.Subject, "delay.")
		m.Data = []byte(id)
		delay := time.Duration(r.IntN(1500)) * time.Millisecond
		if r.IntN(20) == 0 {
			delay = time.Hour
		}
		m.Header.Set(wire.HeaderDelay, delay.String())
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			resp, err := nc.RequestMsg(m, time.Second)
			if err == nil {
				err = wire.ParseError(resp.Header, resp.Data)
			}
			if err == nil {
				var answer struct {
					Tag string `json:"tag"`
				}
				_ = json.Unmarshal(resp.Data, &answer)
				l.mu.Lock()
				if delay != time.Hour {
					l.acked[id] = true
					l.tags[id] = answer.Tag
				}
				l.mu.Unlock()
				l.acks.Add(1)
				break
			}
			if !errors.Is(err, wire.ErrUnavailable) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
				l.mu.Lock()
				l.failed = append(l.failed, fmt.Sprintf("%s: %v", id, err))
				l.mu.Unlock()
				break
			}
			time.Sleep(20 * time.Millisecond) // NB: a retrying publisher's pause, not a wait for an event
		}
	}
}

// whereAre logs what each cell answers to a GET of the messages ids.
func (l *moveLoad) whereAre(t *testing.T, ids []string) {
	nc, err := nats.Connect(l.url)
	if err != nil {
		t.Log(err)
		return
	}
	defer nc.Close()
	for _, id := range ids[:min(5, len(ids))] {
		l.mu.Lock()
		tag := l.tags[id]
		l.mu.Unlock()
		for _, st := range fleet.GatherCells(nc, 500*time.Millisecond) {
			_, _, apiPrefix := fleet.CellSubjects(st.Cell)
			r, err := nc.Request(apiPrefix+"."+wire.VerbGet, []byte(`{"tag":"`+tag+`"}`), 5*time.Second)
			if err == nil {
				err = wire.ParseError(r.Header, r.Data)
			}
			var body []byte
			if r != nil {
				body = r.Data
			}
			t.Logf("message %s, tag %s, on cell %s: %s %v", id, tag, st.Cell, body, err)
		}
	}
}

func (l *moveLoad) stopPublishers() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// waitAcks waits until n more publishes were answered.
func (l *moveLoad) waitAcks(t *testing.T, n int64) {
	t.Helper()
	want := l.acks.Load() + n
	waitProgress(t, wait, int(want), func() int { return int(l.acks.Load()) }, "answered publishes")
}

// verify stops the publishers, waits until every message answered as
// stored is delivered, and checks that none came early. It returns the
// messages delivered more than once: by the cells in order, for each.
func (l *moveLoad) verify(t *testing.T) (dups map[string][]string) {
	t.Helper()
	l.stopPublishers()
	missing := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var ids []string
		for id := range l.acked {
			if len(l.delivered[id]) == 0 {
				ids = append(ids, id)
			}
		}
		return ids
	}
	t.Cleanup(func() {
		if t.Failed() {
			l.whereAre(t, missing())
		}
	})
	checkFor(t, 2*wait, 50*time.Millisecond, func() error {
		if ids := missing(); len(ids) > 0 {
			return fmt.Errorf("%d messages answered as stored not delivered: %v", len(ids), ids[:min(5, len(ids))])
		}
		return nil
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failed) > 0 {
		t.Errorf("%d publishes refused with an error that is not retryable: %v", len(l.failed), l.failed[:min(5, len(l.failed))])
	}
	if len(l.early) > 0 {
		t.Errorf("%d deliveries before their fire time: %v", len(l.early), l.early[:min(5, len(l.early))])
	}
	dups = map[string][]string{}
	for id, cells := range l.delivered {
		if len(cells) > 1 {
			dups[id] = cells
		}
	}
	t.Logf("%d messages answered as stored (and more an hour away), each delivered; %d more than once", len(l.acked), len(dups))
	return dups
}

// moveCells are the two founding cells of the move tests, and their
// fleet's partitions.
var moveCells = []string{"a", "b"}

const movePartitions = 8

func moveArgs(cell string) []string {
	return []string{"--cell", cell, "--fleet-cells", strings.Join(moveCells, ","), "--partitions", strconv.Itoa(movePartitions)}
}

// requestMove asks the owner from of parts to move them to to, and
// returns its answer.
func requestMove(nc *nats.Conn, from, to string, parts []fleet.Range) (fleet.MoveReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	return requestMoveCtx(ctx, nc, from, to, parts)
}

// requestMoveCtx is requestMove until ctx ends.
func requestMoveCtx(ctx context.Context, nc *nats.Conn, from, to string, parts []fleet.Range) (fleet.MoveReply, error) {
	b, _ := json.Marshal(fleet.MoveRequest{Partitions: parts, To: to})
	r, err := nc.RequestWithContext(ctx, fleet.MoveSubject(from), b)
	if err == nil {
		err = wire.ParseError(r.Header, r.Data)
	}
	var rep fleet.MoveReply
	if err == nil {
		err = json.Unmarshal(r.Data, &rep)
	}
	return rep, err
}

// waitOwned waits until cell owns parts and no cell has a move under way,
// as the cells answer.
func waitOwned(t *testing.T, nc *nats.Conn, cell string, parts []fleet.Range) {
	t.Helper()
	checkFor(t, 2*wait, 100*time.Millisecond, func() error { return ownedNow(nc, cell, parts) })
}

// ownedNow returns nil once cell owns parts and no cell has a move under
// way, as the cells answer, else what is not so yet.
func ownedNow(nc *nats.Conn, cell string, parts []fleet.Range) error {
	cells := fleet.GatherCells(nc, 300*time.Millisecond)
	owns := false
	for _, st := range cells {
		if st.Out != nil || st.In != nil {
			return fmt.Errorf("cell %s has a move under way: %+v %+v", st.Cell, st.Out, st.In)
		}
		if st.Cell == cell {
			owns = len(fleet.Subtract(parts, st.Owned, st.Partitions)) == 0
		} else if len(fleet.Subtract(parts, fleet.Subtract(parts, st.Owned, st.Partitions), st.Partitions)) > 0 {
			return fmt.Errorf("cell %s still owns some of %s", st.Cell, fleet.FormatRanges(parts))
		}
	}
	if !owns {
		return fmt.Errorf("cell %s does not own %s yet (%d cells answered)", cell, fleet.FormatRanges(parts), len(cells))
	}
	return nil
}

// TestFleet_Move_UnderLoad_NothingLostEarlyOrTwice moves partitions back
// and forth between two single-node cells while publishers and a
// consumer run through the fleet: every message answered as stored is
// delivered, none early, and a message is delivered twice only when the
// source delivered it before the move froze its partition and the target
// delivered it again (that delivery's answer, dropped by the freeze,
// counts as none).
func TestFleet_Move_UnderLoad_NothingLostEarlyOrTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	startCells(t, bin, nc, srv.ClientURL(), moveCells, moveArgs)
	l := startMoveLoad(t, connect(t, srv), connect(t, srv), "fmove", 64, 16)
	l.waitAcks(t, 300)

	moves := []struct {
		from, to string
		parts    []fleet.Range
	}{{"a", "b", []fleet.Range{{From: 0, To: 1}}}, {"b", "a", []fleet.Range{{From: 4, To: 6}}}, {"b", "a", []fleet.Range{{From: 0, To: 1}}}, {"a", "b", []fleet.Range{{From: 2, To: 6}}}}
	for _, mv := range moves {
		start := time.Now()
		rep, err := requestMove(nc, mv.from, mv.to, mv.parts)
		if err != nil {
			t.Fatalf("move %s from %s to %s: %v", fleet.FormatRanges(mv.parts), mv.from, mv.to, err)
		}
		t.Logf("moved %s from %s to %s at epoch %d: %d messages in %v", fleet.FormatRanges(rep.Partitions), rep.From, rep.To, rep.Epoch, rep.Messages, time.Since(start))
		waitOwned(t, nc, mv.to, mv.parts)
		l.waitAcks(t, 200)
	}
	if _, err := requestMove(nc, "a", "b", []fleet.Range{{From: 7, To: 7}}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("moving a partition its cell does not own: %v, want a 409", err)
	}
	for id, cells := range l.verify(t) {
		if len(cells) != 2 || cells[0] == cells[1] {
			t.Errorf("message %s delivered by %v: want once, or once by each end of a move", id, cells)
		}
	}
}

// moveKill is one round of the crash test: the cell that kills itself,
// at which step of the move.
type moveKill struct {
	target bool   // the target kills itself, else the source
	step   string // crashhook.MoveEnv's value
}

// moveKills are the steps of a move, at each of which a round kills one
// end: every step either end persists or does.
var moveKills = []moveKill{
	{false, "out-recorded:1"}, {false, "chunk-sent:2"}, {true, "in-recorded:1"}, {true, "imported:2"},
	{false, "committing:1"}, {true, "owned:1"}, {false, "released:1"}, {false, "dropped:1"},
}

// TestFleet_Move_SIGKILLAtEachStep moves partitions between two cells
// under load, and in each round one end kills itself with SIGKILL at a
// step of the move (a crash hook, so the kill lands there and not by
// chance); it starts again on its data dir and the move completes, by
// itself or asked again. Every message answered as stored is delivered,
// none early. NATSDELAY_SOAK=1 runs every step five times.
func TestFleet_Move_SIGKILLAtEachStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	heard := fleetHeard(t, nc, moveCells)
	dirs := map[string]string{}
	procs := map[string]*serviceProcess{}
	start := func(cell string, env ...string) {
		env = append([]string{"NATSDELAY_HTTP=", "NATSDELAY_CRASH_MOVE_CHUNK=2048"}, env...)
		procs[cell] = launch(t, bin, env, append([]string{"serve", "--nats", srv.ClientURL(),
			"--data-dir", dirs[cell], "--engine", "pebble", "--ack-wait", "1s"}, moveArgs(cell)...)...)
	}
	for _, c := range moveCells {
		dirs[c] = t.TempDir()
		start(c)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.stop(t)
		}
	})
	waitClosed(t, heard, "every cell's record")
	l := startMoveLoad(t, connect(t, srv), connect(t, srv), "fkill", 64, 4)
	l.waitAcks(t, 200)

	rounds := 1
	if os.Getenv("NATSDELAY_SOAK") != "" {
		rounds = 5
	}
	from, to := "a", "b"
	parts := []fleet.Range{{From: 0, To: 2}}
	for r := range rounds * len(moveKills) {
		k := moveKills[r%len(moveKills)]
		victim := from
		if k.target {
			victim = to
		}
		t0 := time.Now()
		procs[victim].stop(t)
		start(victim, "NATSDELAY_CRASH_MOVE="+k.step)
		waitOwned(t, nc, from, parts)
		t1 := time.Now()
		l.waitAcks(t, 50)
		t2 := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		moved := make(chan error, 1)
		go func() { _, err := requestMoveCtx(ctx, nc, from, to, parts); moved <- err }()
		select {
		case <-procs[victim].done:
		case <-time.After(2 * wait):
			t.Fatalf("round %d: %s did not kill itself at %s:\n%s", r, victim, k.step, procs[victim].output())
		}
		procs[victim].kill(t) // reaps it
		start(victim)
		// Answered by the cell that finished, or never by the one that died.
		cancel()
		<-moved
		// The move goes on by itself where it was; asked again it is
		// carried out, or answered that it is done.
		if _, err := requestMove(nc, from, to, parts); err != nil && !errors.Is(err, wire.ErrConflict) {
			t.Logf("round %d: move asked again: %v", r, err)
		}
		t3 := time.Now()
		waitOwned(t, nc, to, parts)
		t.Logf("round %d: %s killed at %s; %s owns %s (restart %v, load %v, kill %v, done %v)", r, victim, k.step, to, fleet.FormatRanges(parts),
			t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), time.Since(t3))
		l.waitAcks(t, 50)
		from, to = to, from
	}
	l.verify(t)
}

// TestFleet_AddFourthCell_Rebalance adds a cell to a running fleet of
// three and rebalances with the CLI while publishers and a consumer run:
// the plan moves a share of each cell's partitions to the new one, each
// cell then owns 64 of 256, messages due in an hour are found by their
// tags on the cell that now holds them, and every message answered as
// stored is delivered, none early, a message twice only across a move.
func TestFleet_AddFourthCell_Rebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	startCells(t, bin, nc, srv.ClientURL(), fleetCells, fleetArgs)
	later := map[string]string{} // tag -> subject, due in an hour
	for i := range 200 {
		s := fmt.Sprintf("frebal.later.%d", i)
		later[fleetSchedule(t, nc, s, "x")] = s
	}
	l := startMoveLoad(t, connect(t, srv), connect(t, srv), "frebal.now", 128, 4)
	l.waitAcks(t, 200)

	startCells(t, bin, nc, srv.ClientURL(), []string{"d"}, func(string) []string { return []string{"--cell", "d"} })
	code, out := runCLI(t, bin, "cells", "rebalance", "--nats", srv.ClientURL())
	if code != 0 || !strings.Contains(out, "move 64-85 (22) from a to d") || !strings.Contains(out, "--yes") {
		t.Fatalf("cells rebalance: exit %d:\n%s\nwant the plan, a's first move 64-85, and how to carry it out", code, out)
	}
	l.waitAcks(t, 100)
	code, out = runCLI(t, bin, "cells", "rebalance", "--yes", "--nats", srv.ClientURL())
	if code != 0 || strings.Count(out, "moved ") != 3 {
		t.Fatalf("cells rebalance --yes: exit %d:\n%s\nwant three moves", code, out)
	}
	t.Logf("cells rebalance --yes:\n%s", out)
	waitOwned(t, nc, "d", []fleet.Range{{From: 64, To: 85}, {From: 150, To: 170}, {From: 235, To: 255}})
	for _, st := range fleet.GatherCells(nc, 500*time.Millisecond) {
		if fleet.Count(st.Owned) != 64 {
			t.Errorf("cell %s owns %s, %d partitions: want 64", st.Cell, fleet.FormatRanges(st.Owned), fleet.Count(st.Owned))
		}
	}
	code, out = runCLI(t, bin, "cells", "rebalance", "--nats", srv.ClientURL())
	if code != 0 || !strings.Contains(out, "even share already") {
		t.Errorf("cells rebalance after it: exit %d:\n%s\nwant no move", code, out)
	}
	onD := 0
	for tag, subject := range later {
		mi, err := api(nc).Get(context.Background(), wire.MessageRef{Tag: tag})
		if err != nil || mi.Subject != subject {
			t.Fatalf("GET %s (%s) after the rebalance: %+v, %v", tag, subject, mi, err)
		}
		if ownerOf(subject) != "" && fleet.Contains([]fleet.Range{{From: 64, To: 85}, {From: 150, To: 170}, {From: 235, To: 255}}, fleet.Partition(subject, fleet.DefaultPartitions)) {
			onD++
		}
	}
	t.Logf("the %d messages due in an hour found by tag, %d of them now on d", len(later), onD)
	if onD == 0 {
		t.Fatal("no message due in an hour moved to d: the test checks nothing of the move")
	}
	l.waitAcks(t, 100)
	for id, cells := range l.verify(t) {
		if len(cells) != 2 || cells[0] == cells[1] {
			t.Errorf("message %s delivered by %v: want once, or once by each end of a move", id, cells)
		}
	}
}

// clusterMoveArm arms every node of the cluster cell in the cluster move
// test: each kills itself with SIGKILL at the first of these steps it
// reaches as the cell's leader. Each is a step a move passes once, on
// one leader: the next leader carries the move on from the replicated
// record, past it. A node started again is armed again.
const clusterMoveArm = "NATSDELAY_CRASH_MOVE=in-recorded:1,out-recorded:1,committing:1"

// TestFleet_Move_ClusterCell_LeadersSIGKILLed moves partitions under load
// from a single-node cell a to a cell b of three nodes, then back. b's
// nodes kill themselves at steps of the moves (see clusterMoveArm): as
// the target, b's leader dies once it has recorded the move in; as the
// source, b's leader dies once it has recorded the move out (before it
// sends a message), and the next leader, which sends them, dies once it
// has recorded that it asks a to commit. Each time the node that leads b
// next reads the record the last one left in b's replicated store and
// carries the move on; the dead node starts again. Every move completes,
// every message answered as stored is delivered, none early.
// NATSDELAY_SOAK=1 runs three rounds.
func TestFleet_Move_ClusterCell_LeadersSIGKILLed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	const chunks = "NATSDELAY_CRASH_MOVE_CHUNK=2048"
	startCells(t, bin, nc, srv.ClientURL(), moveCells[:1], moveArgs, chunks)
	heard := fleetHeard(t, nc, moveCells[1:])
	b := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	b.extra = moveArgs("b")
	for _, n := range b.nodes {
		n.env = []string{clusterMoveArm, chunks}
	}
	b.startAll()
	waitClosed(t, heard, "cell b's record")
	l := startMoveLoad(t, connect(t, srv), connect(t, srv), "fclust", 64, 4)
	l.waitAcks(t, 200)

	rounds := 1
	if os.Getenv("NATSDELAY_SOAK") != "" {
		rounds = 3
	}
	parts := []fleet.Range{{From: 0, To: 1}}
	for r := range rounds {
		for _, mv := range []struct {
			from, to string
			kills    int
		}{{"a", "b", 1}, {"b", "a", 2}} {
			start := time.Now()
			ctx, cancel := context.WithCancel(context.Background())
			moved := make(chan error, 1)
			go func() { _, err := requestMoveCtx(ctx, nc, mv.from, mv.to, parts); moved <- err }()
			kills := b.restartUntil(t, func() error { return ownedNow(nc, mv.to, parts) })
			cancel()
			<-moved
			if kills != mv.kills {
				t.Fatalf("round %d, move from %s to %s: %d of b's leaders killed themselves, want %d", r, mv.from, mv.to, kills, mv.kills)
			}
			t.Logf("round %d: moved %s from %s to %s in %v, %d of b's leaders SIGKILLed on the way", r, fleet.FormatRanges(parts), mv.from, mv.to, time.Since(start), kills)
			l.waitAcks(t, 100)
		}
	}
	for id, cells := range l.verify(t) {
		t.Logf("message %s delivered by %v (at least once: a leader killed may leave a delivery unanswered)", id, cells)
	}
}

// restartUntil starts again, as it was started, each node that exits,
// until done returns nil (for 2*wait at most), and returns how many did.
func (c *processCluster) restartUntil(t *testing.T, done func() error) int {
	t.Helper()
	restarts := 0
	deadline := time.Now().Add(2 * wait)
	for {
		for _, n := range c.nodes {
			select {
			case <-n.proc.done:
				if !strings.Contains(n.proc.output(), "crash test hook: SIGKILL") {
					t.Fatalf("node %s exited, not by its crash hook:\n%s", n.id, n.proc.output())
				}
				n.proc.kill(t) // reaps it
				c.restart(n)
				restarts++
			default:
			}
		}
		err := done()
		if err == nil {
			return restarts
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d restarts: %v", restarts, err)
		}
		time.Sleep(100 * time.Millisecond) // NB: a poll of the cells' state, as checkFor's
	}
}

// TestFleet_Move_TakesDeadLettersAndDuplicates moves a partition from
// cell a to cell b with, besides a pending message, a dead letter and a
// message answered within the duplicate window. The dead letter is found
// by its tag through the fleet (at b, the partition's owner), once; a
// resend of the message answered before the move is answered by b with
// the first tag, storing nothing.
func TestFleet_Move_TakesDeadLettersAndDuplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	nc := connect(t, srv)
	startCells(t, bin, nc, srv.ClientURL(), moveCells, moveArgs)
	subject := ""
	for i := 0; subject == ""; i++ {
		if s := fmt.Sprintf("fside.%d", i); fleet.Partition(s, movePartitions) == 0 {
			subject = s
		}
	}
	ch := subscribe(t, nc, subject)
	termed := schedule(t, nc, newMsg(subject, "termed"))
	ackSync(t, nc, next(t, ch, "the delivery to TERM").Msg, "+TERM bad payload")
	resend := func() *nats.Msg { return newMsg(subject, "once", wire.HeaderDelay, "1h", "Nats-Msg-Id", "fside-1") }
	first := schedule(t, nc, resend())

	rep, err := requestMove(nc, "a", "b", []fleet.Range{{From: 0, To: 0}})
	if err != nil {
		t.Fatalf("move: %v", err)
	}
	waitOwned(t, nc, "b", []fleet.Range{{From: 0, To: 0}})
	if rep.Messages != 1 || rep.Records != 2 {
		t.Fatalf("moved %d messages and %d records, want the pending one, and the dead letter and the Nats-Msg-Id's record", rep.Messages, rep.Records)
	}
	ctx := context.Background()
	if dl, err := api(nc).DeadLetter(ctx, wire.MessageRef{Tag: termed.Tag}); err != nil || dl.Subject != subject {
		t.Fatalf("DEAD.GET %s through the fleet after the move: %+v, %v; want the dead letter, now on b", termed.Tag, dl, err)
	}
	n := 0
	for dl, err := range api(nc).DeadLetters(ctx, wire.DeadListRequest{Filter: wire.Filter{Subject: subject}}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if dl.Tag != termed.Tag {
			t.Errorf("DEAD.LIST: %s, want only %s", dl.Tag, termed.Tag)
		}
	}
	if n != 1 {
		t.Fatalf("DEAD.LIST of %s through the fleet: %d dead letters, want 1: moved, not copied", subject, n)
	}
	if again := schedule(t, nc, resend()); again.Tag != first.Tag {
		t.Fatalf("a resend after the move: tag %s, want the first answer's %s", again.Tag, first.Tag)
	}
}
