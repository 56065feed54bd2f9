package client

import (
	"context"
	"iter"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// Reschedule moves one pending message to another fire time (At or Shift
// in r; never before now) and returns its new tag and fire time. A
// message in flight is a *wire.ServiceError matching wire.ErrConflict,
// one not pending matching wire.ErrNotFound. With WithRetry it is sent
// again only after no responders.
func (c *Client) Reschedule(ctx context.Context, r wire.RescheduleRequest) (*wire.RescheduleReply, error) {
	data, err := c.requestOnce(ctx, wire.VerbReschedule, r)
	if err != nil {
		return nil, err
	}
	var out wire.RescheduleReply
	return &out, decode(wire.VerbReschedule, data, &out)
}

// Fire makes one pending message due now, as Reschedule does, and returns
// its new tag and fire time.
func (c *Client) Fire(ctx context.Context, ref wire.MessageRef) (*wire.RescheduleReply, error) {
	data, err := c.requestOnce(ctx, wire.VerbFire, ref)
	if err != nil {
		return nil, err
	}
	var out wire.RescheduleReply
	return &out, decode(wire.VerbFire, data, &out)
}

// DeadLetter is the dead letter kept under the tag its message had; none
// is a *wire.ServiceError matching wire.ErrNotFound.
func (c *Client) DeadLetter(ctx context.Context, ref wire.MessageRef) (*wire.DeadLetterInfo, error) {
	var r wire.DeadLetterInfo
	return &r, c.call(ctx, wire.VerbDeadGet, ref, &r)
}

// DeadLetters walks the dead letters that match r, page by page from
// r.After, as an iterator; it stops at the first error, which it yields.
func (c *Client) DeadLetters(ctx context.Context, r wire.DeadListRequest) iter.Seq2[wire.DeadLetterInfo, error] {
	return func(yield func(wire.DeadLetterInfo, error) bool) {
		for {
			var page wire.DeadListReply
			if err := c.call(ctx, wire.VerbDeadList, r, &page); err != nil {
				yield(wire.DeadLetterInfo{}, err)
				return
			}
			for _, d := range page.DeadLetters {
				if !yield(d, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			r.After = page.Next
		}
	}
}

// Bulk runs one step of BULK.<verb> (one of wire.BulkVerbs) and returns
// its reply; pass its Cursor in the next request to go on. Choose r.Op
// (wire.NewBulkOp) once, before the first step, and send it with every
// step of the operation: the service moves no message twice for one
// operation, and CANCEL, REPLAY and DELETE act once by nature, so a step
// with an op is sent again after a timeout or a 503 as any request is
// with WithRetry. A real step without one is sent again only after no
// responders: sent again, a RESCHEDULE by "shift" would move a message
// twice.
func (c *Client) Bulk(ctx context.Context, verb string, r wire.BulkRequest) (*wire.BulkReply, error) {
	v := wire.VerbBulk + "." + verb
	req := c.Request
	if !r.DryRun && r.Op == "" {
		req = c.requestOnce
	}
	data, err := req(ctx, v, r)
	if err != nil {
		return nil, err
	}
	var out wire.BulkReply
	return &out, decode(v, data, &out)
}
