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
func (c *Client) Reschedule(ctx context.Context, r wire.RescheduleRequest) (*Scheduled, error) {
	return c.move(ctx, wire.VerbReschedule, r)
}

// Fire makes one pending message due now, as Reschedule does, and returns
// its new tag and fire time.
func (c *Client) Fire(ctx context.Context, ref wire.MessageRef) (*Scheduled, error) {
	return c.move(ctx, wire.VerbFire, ref)
}

func (c *Client) move(ctx context.Context, verb string, req any) (*Scheduled, error) {
	data, err := c.requestOnce(ctx, verb, req)
	if err != nil {
		return nil, err
	}
	var out wire.RescheduleReply
	if err := decode(verb, data, &out); err != nil {
		return nil, err
	}
	return scheduled(wire.ScheduleReply{Tag: out.Tag, Subject: out.Subject, FireAt: out.FireAt})
}

// DeadLetter is the dead letter kept under the tag its message had; none
// is a *wire.ServiceError matching wire.ErrNotFound.
func (c *Client) DeadLetter(ctx context.Context, ref wire.MessageRef) (*DeadLetterInfo, error) {
	var r wire.DeadLetterInfo
	if err := c.call(ctx, wire.VerbDeadGet, ref, &r); err != nil {
		return nil, err
	}
	d, err := deadLetterInfo(r)
	return &d, err
}

// DeadLetters walks the dead letters that match r, page by page from
// r.After, as an iterator; it stops at the first error, which it yields.
func (c *Client) DeadLetters(ctx context.Context, r wire.DeadListRequest) iter.Seq2[DeadLetterInfo, error] {
	return walk(func(after string) ([]DeadLetterInfo, string, error) {
		r.After = after
		var page wire.DeadListReply
		if err := c.call(ctx, wire.VerbDeadList, r, &page); err != nil {
			return nil, "", err
		}
		out := make([]DeadLetterInfo, 0, len(page.DeadLetters))
		for _, w := range page.DeadLetters {
			d, err := deadLetterInfo(w)
			if err != nil {
				return nil, "", err
			}
			out = append(out, d)
		}
		return out, page.Next, nil
	}, r.After)
}

// Bulk runs one step of BULK.<verb> (one of wire.BulkVerbs) and returns
// its reply; pass its Cursor in the next request to go on, or let
// BulkAll run the steps. Choose r.Op (wire.NewBulkOp) once, before the
// first step, and send it with every step of the operation: the service
// moves no message twice for one operation, and CANCEL, REPLAY and
// DELETE act once by nature, so a step with an op is sent again after a
// timeout or a 503 as any request is with WithRetry. A real step without
// one is sent again only after no responders: sent again, a RESCHEDULE
// by "shift" would move a message twice.
func (c *Client) Bulk(ctx context.Context, verb string, r wire.BulkRequest) (*BulkReply, error) {
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
	if err := decode(v, data, &out); err != nil {
		return nil, err
	}
	rep, err := bulkReply(out)
	return &rep, err
}

// BulkResult is what the steps of a bulk operation did in all. Op and
// Cursor say where it stands: after an error, a request with them
// resumes it where it stopped; Cursor is empty once it is done.
type BulkResult struct {
	Op      string
	Cursor  string
	Steps   int
	Count   int
	Skipped int
	Already int
	Scanned int
}

// BulkAll runs BULK.<verb> from r.Cursor to its last step and returns
// the sums of its steps. A real run without r.Op is given a new one
// (wire.NewBulkOp) before its first step, so that with WithRetry each
// step, the first too, is sent again after a timeout or a 503 and moves
// no message twice. each, when not nil, is called with every step's
// reply; an error it returns stops the run. The result is returned with
// the error too: its Op and Cursor resume the run.
func (c *Client) BulkAll(ctx context.Context, verb string, r wire.BulkRequest, each func(*BulkReply) error) (BulkResult, error) {
	if !r.DryRun && r.Op == "" {
		r.Op = wire.NewBulkOp()
	}
	res := BulkResult{Op: r.Op, Cursor: r.Cursor}
	for {
		rep, err := c.Bulk(ctx, verb, r)
		if err != nil {
			return res, err
		}
		res.Steps++
		res.Count += rep.Count
		res.Skipped += rep.Skipped
		res.Already += rep.Already
		res.Scanned += rep.Scanned
		res.Cursor = rep.Cursor
		if rep.Op != "" {
			res.Op = rep.Op
		}
		if each != nil {
			if err := each(rep); err != nil {
				return res, err
			}
		}
		if rep.Cursor == "" {
			return res, nil
		}
		r.Cursor, r.Op = rep.Cursor, res.Op
	}
}
