package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/client"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// editCrashSize is how many times each engine is killed inside edits of
// schedules, and how many schedules are edited. NATSDELAY_SOAK=1 (make
// soak) runs the long version on both engines; the default is a few
// rounds on pebble.
func editCrashSize() (engines []string, kills, schedules int) {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return []string{"pebble", "bolt"}, 60, 16
	}
	return []string{"pebble"}, 3, 4
}

// editVersions is what the test knows of each schedule's payload: the
// last edit answered, and the one sent when the process was killed, if
// its answer never came.
type editVersions struct {
	mu      sync.Mutex
	acked   map[string]string
	pending map[string]string
}

// TestCrashLoop_SIGKILL_ScheduleEdit kills natsdelay serve inside edits of
// recurring schedules (SCHEDULE.EDIT of the interval and the payload):
// right before and right after the rewrite's commit, by the crash hook,
// and from outside at random moments while edits go on. After each kill
// the store on disk holds each schedule exactly once, with one occurrence
// to plan (the old schedule or the new, never both, never neither), and
// after the restart each schedule's payload is the last edit answered or
// the one the kill interrupted: never an older one, never another. At the
// end every schedule delivers its last payload.
func TestCrashLoop_SIGKILL_ScheduleEdit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	engines, _, _ := editCrashSize()
	for i, eng := range engines {
		t.Run(eng, func(t *testing.T) { editCrashLoop(t, bin, eng, uint64(i)) })
	}
}

func editCrashLoop(t *testing.T, bin, eng string, seed uint64) {
	_, kills, n := editCrashSize()
	start := time.Now()
	srv := startServer(t)
	dir := t.TempDir()
	prefix := "crashedit." + eng
	nc := connect(t, srv)
	latest := subscribeLatest(t, nc, prefix+".>")
	args := []string{"serve", "--nats", srv.ClientURL(), "--data-dir", dir, "--engine", eng, "--ack-wait", "1s"}
	var proc *serviceProcess
	defer func() {
		if proc != nil {
			proc.kill(t) // only when the test failed midway
		}
	}()
	proc = launch(t, bin, []string{"NATSDELAY_HTTP="}, args...)
	subjects := make([]string, n)
	msgs := make([]*nats.Msg, n)
	v := &editVersions{acked: map[string]string{}, pending: map[string]string{}}
	for i := range n {
		subjects[i] = fmt.Sprintf("%s.s%d", prefix, i)
		msgs[i] = newMsg(subjects[i], "v0", "Delay-Every", recurEvery.String(), "Delay-Id", "sched-"+strconv.Itoa(i))
		v.acked[subjects[i]] = "v0"
	}
	scheduleMany(t, nc, msgs)
	proc.stop(t)
	proc = nil

	r := rand.New(rand.NewPCG(seed, 7))
	for round := range kills {
		// NB: each round's process first shows what the last kill left,
		// then is killed itself: one start a round.
		switch round % 3 {
		case 0, 1:
			stage := [...]string{"rewrite-before-commit", "rewrite-after-commit"}[round%3]
			proc = launch(t, bin, []string{"NATSDELAY_HTTP=", "NATSDELAY_CRASH_ADVANCE=" + stage + ":1"}, args...)
			checkEditedPayloads(t, nc, subjects, v)
			subj := subjects[r.IntN(n)]
			payload := fmt.Sprintf("r%d", round)
			if _, err := editPayload(nc, subj, payload, round); err == nil {
				t.Fatalf("round %d: the edit was answered, but the hook kills the process at its commit", round)
			}
			waitSelfKilled(t, proc)
			if stage == "rewrite-after-commit" {
				v.acked[subj] = payload // committed: the edit is durable, answered or not
			}
		default:
			proc = launch(t, bin, []string{"NATSDELAY_HTTP="}, args...)
			checkEditedPayloads(t, nc, subjects, v)
			editUntilKilled(t, nc, proc, subjects, v, r, round)
		}
		proc = nil
		checkCrashedStoreOf(t, eng, dir, subjects, true)
	}

	proc = launch(t, bin, []string{"NATSDELAY_HTTP="}, args...)
	checkEditedPayloads(t, nc, subjects, v)
	for _, s := range subjects {
		want := v.acked[s]
		checkFor(t, wait, 10*time.Millisecond, func() error {
			if got := latest.of(s); got != want {
				return fmt.Errorf("%s delivers %q, want its last edit %q", s, got, want)
			}
			return nil
		})
	}
	proc.stop(t)
	proc = nil
	t.Logf("%s: %d kills inside edits of %d schedules in %v", eng, kills, n, time.Since(start).Round(time.Millisecond))
}

// editPayload edits subj's schedule: the payload, and an interval of
// 100ms or 150ms by round.
func editPayload(nc *nats.Conn, subj, payload string, round int) (*client.MessageInfo, error) {
	id := schedID(subj)
	every := [...]string{"100ms", "150ms"}[round%2]
	cl, err := client.New(nc, client.WithTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	return cl.EditSchedule(context.Background(), wire.ScheduleEditRequest{Subject: subj, ID: id, Every: every, Payload: []byte(payload)})
}

// editUntilKilled edits the schedules one after another, and kills the
// process at a random moment once a few edits were answered.
func editUntilKilled(t *testing.T, nc *nats.Conn, proc *serviceProcess, subjects []string, v *editVersions, r *rand.Rand, round int) {
	t.Helper()
	stop := make(chan struct{})
	answered := make(chan struct{}, 1024)
	done := make(chan struct{})
	order := r.Perm(len(subjects))
	go func() {
		// Owned by this function, which waits for it below.
		defer close(done)
		for j := 0; ; j++ {
			select {
			case <-stop:
				return
			default:
			}
			subj := subjects[order[j%len(order)]]
			payload := fmt.Sprintf("r%d-%d", round, j)
			v.mu.Lock()
			v.pending[subj] = payload
			v.mu.Unlock()
			_, err := editPayload(nc, subj, payload, j)
			if err != nil {
				return // the process is gone: this edit may or may not be stored
			}
			v.mu.Lock()
			v.acked[subj], v.pending[subj] = payload, ""
			v.mu.Unlock()
			answered <- struct{}{}
		}
	}()
	for range 2 + r.IntN(4) {
		select {
		case <-answered:
		case <-time.After(wait):
			t.Fatal("no edit answered")
		}
	}
	time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
	proc.kill(t)
	close(stop)
	<-done
}

// checkEditedPayloads checks, through GET of each schedule, that its
// payload is the last edit answered or the one the kill interrupted, and
// makes that the one answered.
func checkEditedPayloads(t *testing.T, nc *nats.Conn, subjects []string, v *editVersions) {
	t.Helper()
	cl := api(nc)
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range subjects {
		mi, err := cl.Get(context.Background(), wire.MessageRef{Subject: s, ID: schedID(s), Payload: true})
		if err != nil {
			t.Fatalf("GET %s after the restart: %v", s, err)
		}
		got := string(mi.Payload)
		switch {
		case got == v.acked[s]:
		case got != "" && got == v.pending[s]:
			v.acked[s] = got
		default:
			t.Errorf("%s after the restart has payload %q, want the last edit answered %q or the one interrupted %q", s, got, v.acked[s], v.pending[s])
		}
		v.pending[s] = ""
	}
}

// latestPayloads is the last payload delivered on each subject; every
// delivery is ACKed.
type latestPayloads struct {
	mu sync.Mutex
	m  map[string]string
}

func (l *latestPayloads) of(subject string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[subject]
}

func subscribeLatest(t *testing.T, nc *nats.Conn, subject string) *latestPayloads {
	t.Helper()
	l := &latestPayloads{m: map[string]string{}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		l.mu.Lock()
		l.m[m.Subject] = string(m.Data)
		l.mu.Unlock()
		_ = m.Respond([]byte("+ACK"))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// schedID is the Delay-Id of the schedule on subj, <prefix>.s<i>.
func schedID(subj string) string {
	return "sched-" + subj[strings.LastIndex(subj, ".s")+2:]
}
