package client

import (
	"context"
	"fmt"
	"iter"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// ListPage is one page of LIST: a subject's pending messages in fire
// order, after req.After.
func (c *Client) ListPage(ctx context.Context, req wire.ListRequest) (*MessagePage, error) {
	var r wire.ListReply
	if err := c.call(ctx, wire.VerbList, req, &r); err != nil {
		return nil, err
	}
	ms, err := messageInfos(r.Messages)
	return &MessagePage{Messages: ms, Next: r.Next}, err
}

// SubjectsPage is one page of SUBJECTS: the subjects with pending messages
// that match req.Filter, in subject order, after req.After.
func (c *Client) SubjectsPage(ctx context.Context, req wire.SubjectsRequest) (*wire.SubjectsReply, error) {
	var r wire.SubjectsReply
	return &r, c.call(ctx, wire.VerbSubjects, req, &r)
}

// SchedulesPage is one page of SCHEDULES: the recurring schedules, each as
// its next occurrence, after req.After.
func (c *Client) SchedulesPage(ctx context.Context, req wire.SchedulesRequest) (*MessagePage, error) {
	var r wire.SchedulesReply
	if err := c.call(ctx, wire.VerbSchedules, req, &r); err != nil {
		return nil, err
	}
	ms, err := messageInfos(r.Schedules)
	return &MessagePage{Messages: ms, Next: r.Next}, err
}

// List walks a subject's pending messages in fire order, from req.After,
// a page of req.Limit (the service's default if nil) at a time. An error
// ends the walk as its last element.
func (c *Client) List(ctx context.Context, req wire.ListRequest) iter.Seq2[MessageInfo, error] {
	return walk(func(after string) ([]MessageInfo, string, error) {
		req.After = after
		r, err := c.ListPage(ctx, req)
		if err != nil {
			return nil, "", err
		}
		return r.Messages, r.Next, nil
	}, req.After)
}

// Subjects walks the subjects with pending messages that match req.Filter
// (every subject if empty), as List does.
func (c *Client) Subjects(ctx context.Context, req wire.SubjectsRequest) iter.Seq2[wire.SubjectInfo, error] {
	return walk(func(after string) ([]wire.SubjectInfo, string, error) {
		req.After = after
		r, err := c.SubjectsPage(ctx, req)
		if err != nil {
			return nil, "", err
		}
		return r.Subjects, r.Next, nil
	}, req.After)
}

// Schedules walks the recurring schedules (of req.Subject if set), as
// List does.
func (c *Client) Schedules(ctx context.Context, req wire.SchedulesRequest) iter.Seq2[MessageInfo, error] {
	return walk(func(after string) ([]MessageInfo, string, error) {
		req.After = after
		r, err := c.SchedulesPage(ctx, req)
		if err != nil {
			return nil, "", err
		}
		return r.Messages, r.Next, nil
	}, req.After)
}

// walk yields the items of the pages page returns, from the cursor after
// on, until a page has no next cursor, the loop stops, a page fails, or a
// page's next cursor is the one it was asked with.
func walk[T any](page func(after string) ([]T, string, error), after string) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			items, next, err := page(after)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			// NB: a next that does not move on would ask for the same
			// page forever; end the walk with an error instead.
			if next == after {
				var zero T
				yield(zero, fmt.Errorf("the page after %q names it as the next again", after))
				return
			}
			after = next
		}
	}
}
