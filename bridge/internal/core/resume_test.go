package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/natsdelay/natsdelay/bridge/internal/core"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/dispatch"
	"github.com/natsdelay/natsdelay/keys"
)

// readyAtDelivery is a publisher that notes whether the Service took work
// at the moment each delivery went out.
type readyAtDelivery struct {
	*publisher
	s        atomic.Pointer[core.Service]
	sent     atomic.Int32
	notReady chan error
}

func (p *readyAtDelivery) Deliver(k keys.Key, msg *delaystore.StoredMessage, attempt uint32) error {
	if s := p.s.Load(); s != nil {
		if err := s.Ready(); err != nil {
			p.notReady <- err
		}
	}
	p.sent.Add(1)
	return p.publisher.Deliver(k, msg, attempt)
}

// TestService_Resume_DeliversOnlyOnceServing checks that a generation
// started on a reopened store (a leader taking over, a store recovered)
// delivers nothing before it is the Service's current one. Before that,
// the ACK of its delivery met the 503 of a Service still resuming, and
// the consumer, who had done its work, got the message again after the
// ACK wait.
func TestService_Resume_DeliversOnlyOnceServing(t *testing.T) {
	p := &readyAtDelivery{publisher: newPublisher(), notReady: make(chan error, 16)}
	s, due := openSuspendedWithDue(t, p, errors.New("not the leader"))
	p.s.Store(s)
	// The new generation is held back from taking over until its
	// dispatcher has either delivered or turned once without delivering:
	// the widest the gap can be.
	core.SetBeforeSwapForTest(func(d *dispatch.Dispatcher) {
		deadline := time.Now().Add(wait)
		for p.sent.Load() == 0 && d.Stats().FencedPasses == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	})
	t.Cleanup(func() { core.SetBeforeSwapForTest(nil) })

	s.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.WaitUp(ctx); err != nil {
		t.Fatalf("WaitUp after Resume: %v", err)
	}
	k := next(t, p.delivered)
	if k != due {
		t.Fatalf("delivered %s, want %s", k, due)
	}
	select {
	case err := <-p.notReady:
		t.Errorf("delivered while the Service was down (%v): its ACK would be refused", err)
	default:
	}
	acked := make(chan error, 1)
	if err := s.Ack(k, dispatch.Ack{Kind: dispatch.AckDone}, func(err error) { acked <- err }); err != nil {
		t.Fatalf("Ack of the first delivery after Resume: %v", err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("Ack applied with %v", err)
	}
}
