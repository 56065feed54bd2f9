package integration_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// pauseRounds is how many times the pause test stops a leader: once in
// make test, 12 times in make soak.
func pauseRounds() int {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 12
	}
	return 1
}

// pausedAnswerWait is how long a request sent while the old leader is
// stopped waits for its answer. Far longer than any answer takes on a
// loaded machine; a request that the stopped node alone took would wait
// for good.
const pausedAnswerWait = 30 * time.Second

// highestTerm is the highest Raft term among the nodes that answer
// CLUSTER.STATUS, waiting for want of them.
func highestTerm(nc *nats.Conn, want int) uint64 {
	var term uint64
	for _, st := range gatherStatus(nc, 300*time.Millisecond, want) {
		term = max(term, st.Term)
	}
	return term
}

// pauseLength is how long a round stops the leader: 6 s in make test, 5
// to 20 s in make soak.
func pauseLength(r *rand.Rand) time.Duration {
	if os.Getenv("NATSDELAY_SOAK") != "" {
		return 5*time.Second + time.Duration(r.Int64N(int64(15*time.Second)))
	}
	return 6 * time.Second
}

// deliveryLog records every delivery a consumer sees, by tag, with the time
// it arrived, and the time each tag's ACK was confirmed with +OK.
type deliveryLog struct {
	mu        sync.Mutex
	seen      map[string][]time.Time
	confirmed map[string]time.Time
	firsts    atomic.Int64
}

func newDeliveryLog() *deliveryLog {
	return &deliveryLog{seen: map[string][]time.Time{}, confirmed: map[string]time.Time{}}
}

// consume subscribes to subject. The first delivery of each message is
// left unanswered, so that the leader holds it in flight; every later one
// is ACKed with a request, and a +OK answer recorded.
func (l *deliveryLog) consume(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	var wg sync.WaitGroup
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		at := time.Now()
		tag := m.Header.Get(wire.HeaderTag)
		l.mu.Lock()
		l.seen[tag] = append(l.seen[tag], at)
		first := len(l.seen[tag]) == 1
		l.mu.Unlock()
		if first {
			l.firsts.Add(1)
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := nc.Request(m.Reply, []byte("+ACK"), 5*time.Second)
			if err == nil && string(rep.Data) == wire.ReplyOK {
				l.mu.Lock()
				if _, ok := l.confirmed[tag]; !ok {
					l.confirmed[tag] = time.Now()
				}
				l.mu.Unlock()
			}
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sub.Unsubscribe()
		wg.Wait()
	})
}

// lateAfter counts the deliveries that arrived after resumed of messages
// whose ACK was confirmed before it: once +OK is sent the message is gone
// from the cluster, so only a node acting on a stale store sends it.
func (l *deliveryLog) lateAfter(resumed time.Time) (late, confirmed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for tag, at := range l.confirmed {
		if !at.Before(resumed) {
			continue
		}
		confirmed++
		for _, seen := range l.seen[tag] {
			if seen.After(resumed) {
				late++
			}
		}
	}
	return late, confirmed
}

// seenTag says whether the message with tag was delivered.
func (l *deliveryLog) seenTag(tag string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen[tag]) > 0
}

// deliveriesAfter counts the deliveries after at of the messages whose
// tags are keys of tags.
func (l *deliveryLog) deliveriesAfter(tags *sync.Map, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for tag, seen := range l.seen {
		if _, ok := tags.Load(tag); !ok {
			continue
		}
		for _, s := range seen {
			if s.After(at) {
				n++
			}
		}
	}
	return n
}

// leaderAnswers polls every node's /leader until stop is closed, and
// counts the rounds in which more than one node answered 200.
func leaderAnswers(t *testing.T, addrs []string, stop <-chan struct{}) (rounds, twoLeaders int) {
	client := &http.Client{Timeout: 200 * time.Millisecond}
	for {
		select {
		case <-stop:
			return rounds, twoLeaders
		default:
		}
		leaders := 0
		for _, a := range addrs {
			resp, err := client.Get("http://" + a + "/leader")
			if err != nil {
				continue // the paused node: no answer
			}
			if resp.StatusCode == http.StatusOK {
				leaders++
			}
			resp.Body.Close()
		}
		rounds++
		if leaders > 1 {
			twoLeaders++
		}
	}
}

// TestClusterProcess_PausedLeader_ActsOnNothing runs three real natsdelay
// serve processes as a cluster and, each round, SIGSTOPs the leader while
// it holds deliveries in flight and messages that fall due during the
// pause. Meanwhile a new leader is elected, confirms ACKs of the in-flight
// messages with +OK and cancels the others; then the old leader resumes.
// It checks the fencing guarantees: a node resumed from a pause delivers
// none of the canceled messages and none whose ACK was confirmed (it acts
// only under a leadership lease that the pause ran out); at most one node
// answers /leader with 200 in any polling round after the resume; and
// while the old leader is stopped, every ingest and API request sent once
// the new leader serves is answered (the stopped node's subscriptions take
// nothing from the new leader's). At the end each node stops on SIGTERM.
func TestClusterProcess_PausedLeader_ActsOnNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	c := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	c.extra = []string{"--http", "127.0.0.1:0", "--ack-wait", "2s"}
	c.startAll()
	var httpAddrs []string
	for _, n := range c.nodes {
		httpAddrs = append(httpAddrs, httpAddrOf(t, n.proc))
	}
	t.Cleanup(func() {
		// A failed round may leave a node stopped: SIGKILL in the
		// cleanup of the cluster ends it either way.
		for _, n := range c.nodes {
			if n.proc != nil {
				_ = n.proc.cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	})

	nc := connect(t, srv)
	r := rand.New(rand.NewPCG(20, 4))
	leader := c.waitLeader(nc, "")
	for round := range pauseRounds() {
		pause := pauseLength(r)
		acked := newDeliveryLog()
		ackSubject := fmt.Sprintf("pause.ack.%d", round)
		acked.consume(t, nc, ackSubject)
		canceled := newDeliveryLog()
		cancelSubject := fmt.Sprintf("pause.cancel.%d", round)
		canceled.consume(t, nc, cancelSubject)

		// In flight on the leader: delivered once, unanswered.
		const n = 100
		var msgs []*nats.Msg
		for i := range n {
			msgs = append(msgs, newMsg(ackSubject, fmt.Sprint(i), "Delay", "300ms"))
		}
		scheduleMany(t, nc, msgs)
		checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			if got := acked.firsts.Load(); got < n {
				return fmt.Errorf("%d of %d first deliveries", got, n)
			}
			return nil
		})
		// Due while the leader is stopped, well after a new one serves.
		msgs = msgs[:0]
		due := pause - 1500*time.Millisecond
		for i := range n {
			msgs = append(msgs, newMsg(cancelSubject, fmt.Sprint(i), "Delay", due.String()))
		}
		toCancel := scheduleMany(t, nc, msgs)

		old := c.node(leader)
		stoppedAt := time.Now()
		if err := old.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		leader = c.waitLeader(nc, old.id)
		tookOver := time.Since(stoppedAt)
		takeoverTerm := highestTerm(nc, len(c.nodes)-1)
		if round == 0 {
			// cluster status shows the stopped member, not only those
			// that answer.
			code, out := runCLI(t, bin, "cluster", "status", "--nats", srv.ClientURL(), "--timeout", "1s")
			if code != 0 || !regexp.MustCompile(`(?m)^`+old.id+`\s+\S+\s+no answer`).MatchString(out) {
				t.Errorf("cluster status with %s stopped: exit %d\n%s\nwant it listed with no answer", old.id, code, out)
			}
		}
		// Every request reaches the new leader, none is lost to the
		// stopped node's subscriptions. A request is sent once and waits
		// as long as it takes: the old leader stays stopped until every
		// answer is in (the pause grows on a slow machine), so one taken
		// by its subscriptions alone would never be answered, while a
		// slow answer is no failure.
		var cancels sync.WaitGroup
		var unanswered, notLeader, beforeCancel atomic.Int64
		var canceledTags sync.Map
		for _, s := range toCancel {
			cancels.Add(1)
			go func() {
				defer cancels.Done()
				body, _ := json.Marshal(map[string]string{"tag": s.Tag})
				rep, err := nc.Request(wire.DefaultAPIPrefix+".CANCEL", body, pausedAnswerWait)
				if err != nil {
					unanswered.Add(1)
					return
				}
				code := rep.Header.Get(wire.HeaderServiceErrorCode)
				if code == "404" && canceled.seenTag(s.Tag) {
					// On a slow machine the new leader delivered it (and
					// the consumer ACKed its redelivery) before the
					// CANCEL came: not canceled, so not checked below.
					beforeCancel.Add(1)
					return
				}
				if code == "503" {
					notLeader.Add(1) // judged below, with the term
					return
				}
				var cr cancelReply
				if code != "" || json.Unmarshal(rep.Data, &cr) != nil || !cr.Canceled {
					t.Errorf("round %d: CANCEL %s: %q %v", round, s.Tag, rep.Data, rep.Header)
					return
				}
				canceledTags.Store(s.Tag, true)
			}()
		}
		cancels.Wait()
		if t.Failed() {
			return
		}
		for i := range 50 {
			if _, err := nc.RequestMsg(newMsg("pause.other", fmt.Sprint(i), "Delay", "1h"), pausedAnswerWait); err != nil {
				unanswered.Add(1)
			}
			if _, err := nc.Request(wire.DefaultAPIPrefix+".INFO", nil, pausedAnswerWait); err != nil {
				unanswered.Add(1)
			}
		}
		if n, refused := unanswered.Load(), notLeader.Load(); n > 0 || refused > 0 {
			// NB: a second election while the old leader is stopped
			// (the new leader missed its heartbeats on a loaded machine)
			// leaves a moment with no leader subscribed, in which a
			// request reaches the stopped node alone and waits for its
			// resume, and the deposed leader answers 503: documented in
			// docs/cluster.md, and not what this round checks.
			if term := highestTerm(nc, len(c.nodes)-1); term > takeoverTerm {
				t.Logf("round %d: %d requests unanswered and %d CANCELs answered 503 across an election while %s was stopped (term %d, then %d): not counted", round, n, refused, old.id, takeoverTerm, term)
			} else {
				t.Errorf("round %d: %d requests unanswered after %v and %d CANCELs answered 503 while %s was stopped and %s led, term %d throughout", round, n, pausedAnswerWait, refused, old.id, leader, term)
			}
		}
		checkFor(t, 30*time.Second, 10*time.Millisecond, func() error {
			if _, confirmed := acked.lateAfter(time.Now()); confirmed < n {
				return fmt.Errorf("%d of %d ACKs confirmed by %s", confirmed, n, leader)
			}
			return nil
		})

		if rest := time.Until(stoppedAt.Add(pause)); rest > 0 {
			time.Sleep(rest) // the pause itself: its length is the test's input
		}
		stopPolling := make(chan struct{})
		polled := make(chan [2]int, 1)
		go func() {
			rounds, two := leaderAnswers(t, httpAddrs, stopPolling)
			polled <- [2]int{rounds, two}
		}()
		resumedAt := time.Now()
		if err := old.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// The resumed node has rejoined as a follower once it names the
		// new leader; then its stale timers (ack wait, due times) have all
		// run out, and anything it would send has been sent.
		checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			st, ok := gatherStatus(nc, 300*time.Millisecond, 3)[old.id]
			if !ok || st.Role != wire.RoleFollower || st.LeaderID == "" {
				return fmt.Errorf("%s: answered %v, role %q, leader %q", old.id, ok, st.Role, st.LeaderID)
			}
			return nil
		})
		// NB: one ack wait more, so that a redelivery the resumed node
		// had planned would have been published and received.
		time.Sleep(3 * time.Second)
		close(stopPolling)
		p := <-polled

		late, confirmed := acked.lateAfter(resumedAt)
		if late > 0 {
			t.Errorf("round %d: %d deliveries after %s resumed of the %d messages whose ACK %s had confirmed", round, late, old.id, confirmed, leader)
		}
		if got := canceled.deliveriesAfter(&canceledTags, resumedAt); got > 0 {
			t.Errorf("round %d: %d deliveries after %s resumed of the messages canceled while it was stopped", round, got, old.id)
		}
		if p[1] > 0 {
			t.Errorf("round %d: in %d of %d polling rounds after the resume, two nodes answered /leader 200", round, p[1], p[0])
		}
		t.Logf("round %d: %s stopped for %v, %s led after %v; after the resume: %d late deliveries of %d confirmed, %d of %d canceled delivered (%d delivered before their CANCEL), %d /leader rounds with two leaders of %d",
			round, old.id, pause, leader, tookOver.Round(time.Millisecond), late, confirmed, canceled.deliveriesAfter(&canceledTags, resumedAt), n, beforeCancel.Load(), p[1], p[0])
		if t.Failed() {
			return
		}
	}
	// Then every node stops on SIGTERM within stop's bound, those paused
	// while they led included: Raft's pipeline to a follower that answered
	// a resumed leader with a newer term could wait for good, and the
	// node's stop with it.
	for _, n := range c.nodes {
		n.proc.stop(t)
		n.proc = nil
	}
}
