package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// answerWait bounds how long a requester waits for the answer to one
// ingest request: far longer than any commit or step-down takes, even
// under -race on a loaded machine, so that only a request nobody answers
// reaches it.
const answerWait = 20 * time.Second

// answerLoad is synchronous ingest requesters, each waiting for the
// answer to its request before it sends the next, as a publisher using
// nats.go's Request does. It counts the answers by kind and keeps the
// requests that got none.
type answerLoad struct {
	ok, unavailable, noResponders atomic.Int64
	mu                            sync.Mutex
	unanswered                    []string
	other                         []string
	stop                          chan struct{}
	wg                            sync.WaitGroup
}

// startAnswerLoad starts n requesters on their own connections to url;
// they stop when the test ends or at halt.
func startAnswerLoad(t *testing.T, url, subject string, n int) *answerLoad {
	t.Helper()
	l := &answerLoad{stop: make(chan struct{})}
	for i := range n {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer nc.Close()
			l.run(nc, fmt.Sprintf("%s.%d", subject, i))
		}()
	}
	t.Cleanup(l.halt)
	return l
}

func (l *answerLoad) run(nc *nats.Conn, subject string) {
	for seq := 0; ; seq++ {
		select {
		case <-l.stop:
			return
		default:
		}
		id := fmt.Sprintf("%s-%d", subject, seq)
		m := newMsg(subject, id, "Delay", "1h", wire.HeaderID, id)
		sent := time.Now()
		rep, err := nc.RequestMsg(m, answerWait)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			// Nobody subscribed: between two leaders. A publisher
			// retries; so does this one, after a moment.
			l.noResponders.Add(1)
			select {
			case <-l.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		case errors.Is(err, nats.ErrTimeout):
			l.note(&l.unanswered, fmt.Sprintf("%s: no answer within %v (sent at %s)", id, answerWait, sent.Format("15:04:05.000")))
		case err != nil:
			if !errors.Is(err, nats.ErrConnectionClosed) {
				l.note(&l.other, fmt.Sprintf("%s: %v", id, err))
			}
			return
		case rep.Header.Get(wire.HeaderServiceErrorCode) == "503":
			l.unavailable.Add(1)
		case rep.Header.Get(wire.HeaderServiceErrorCode) != "":
			l.note(&l.other, fmt.Sprintf("%s: %s %s", id, rep.Header.Get(wire.HeaderServiceErrorCode), rep.Header.Get(wire.HeaderServiceError)))
		default:
			l.ok.Add(1)
		}
	}
}

func (l *answerLoad) note(to *[]string, s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*to = append(*to, s)
}

// halt stops the requesters and waits for them: each ends once its
// request under way is answered or times out.
func (l *answerLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// waitAnswered waits until n more requests were answered with success.
func (l *answerLoad) waitAnswered(t *testing.T, n int64) {
	t.Helper()
	waitGrowth(t, "acknowledged ingest", &l.ok, n)
}

// check fails t for every request that got no answer or an answer other
// than success or a 503.
func (l *answerLoad) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("answers: %d stored, %d 503, %d no responders; %d unanswered", l.ok.Load(), l.unavailable.Load(), l.noResponders.Load(), len(l.unanswered))
	if len(l.unanswered) > 0 {
		t.Errorf("%d requests got no answer, where a leader that steps down answers 503:\n%s", len(l.unanswered), strings.Join(l.unanswered, "\n"))
	}
	if len(l.other) > 0 {
		t.Errorf("%d requests got neither success nor a 503:\n%s", len(l.other), strings.Join(l.other, "\n"))
	}
}

// stepDownRounds is how many times the step-down tests take the
// leadership away under load.
func stepDownRounds() int {
	if testing.Short() {
		return 2
	}
	return 4
}

// TestClusterProcess_LeaderStepsDown_EveryRequestAnswered runs three
// natsdelay serve processes and, while 16 synchronous requesters publish,
// cuts the leader off from the other two (its Raft transport, not NATS)
// until it steps down for want of a quorum and another node leads, then
// heals, several times. Every request must be answered, with success or a
// 503 (or find nobody subscribed, between two leaders): a leader that
// steps down answers what it holds with a 503 `not the leader`
// (docs/cluster.md), never leaving a publisher to its timeout.
func TestClusterProcess_LeaderStepsDown_EveryRequestAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := natsdelayBinary(t)
	srv := startServer(t)
	c := newProcessCluster(t, bin, srv.ClientURL(), 3, nil)
	part := newPartition(t, []string{"nodea", "nodeb", "nodec"})
	for _, n := range c.nodes {
		n.addr = part.proxy(t, n.id, n.listen)
	}
	c.startAll()
	watch := connect(t, srv)
	leader := c.waitLeader(watch, "")

	l := startAnswerLoad(t, srv.ClientURL(), "stepdown", 16)
	l.waitAnswered(t, 50)
	for range stepDownRounds() {
		old := leader
		part.cut(old)
		c.waitLeader(watch, old) // another node leads
		part.heal()
		// The old leader follows again, and the load goes on at the new
		// one.
		checkFor(t, time.Minute, 20*time.Millisecond, func() error {
			st, ok := gatherStatus(watch, 300*time.Millisecond, 3)[old]
			if !ok || st.LeaderID == "" || st.Role == wire.RoleLeader {
				return fmt.Errorf("%s answered %v, role %q, leader %q", old, ok, st.Role, st.LeaderID)
			}
			return nil
		})
		leader = c.waitLeader(watch, "")
		l.waitAnswered(t, 50)
	}
	l.halt()
	l.check(t)
}

// TestCluster_InProcess_LeaderTransfer_EveryRequestAnswered is the same
// with a leadership transfer, which a process cannot be asked for: nodes
// in one process (real TCP between them, one real NATS server), the
// leader's Raft node told to hand its leadership over while 16
// synchronous requesters publish, several times.
func TestCluster_InProcess_LeaderTransfer_EveryRequestAnswered(t *testing.T) {
	srv := startServer(t)
	nodes := startInProcessCluster(t, srv, 3)
	leader := serving(t, nodes)

	l := startAnswerLoad(t, srv.ClientURL(), "transfer", 16)
	l.waitAnswered(t, 50)
	for range stepDownRounds() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := leader.node.TransferLeadership(ctx)
		cancel()
		if err != nil {
			t.Logf("transfer from %s: %v", leader.id, err) // an election of its own may have moved it
		}
		leader = serving(t, nodes)
		l.waitAnswered(t, 50)
	}
	l.halt()
	l.check(t)
}
