package client

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// SetLimit stores l, the flow control of l.Pattern, replacing the whole
// limit the pattern had, and returns it as stored. With l.KeyHeader it
// bounds each value of that header over the matching subjects (each
// tenant: wire.Limit{Pattern: ">", KeyHeader: "Tenant", MaxInFlight: 50,
// Rate: 100}), with l.Whole the matching subjects together.
func (c *Client) SetLimit(ctx context.Context, l wire.Limit) (*wire.Limit, error) {
	var r wire.Limit
	return &r, c.call(ctx, wire.VerbLimitsSet, l, &r)
}

// Limit is the stored limit of pattern; none is a *wire.ServiceError
// matching wire.ErrNotFound.
func (c *Client) Limit(ctx context.Context, pattern string) (*wire.Limit, error) {
	var r wire.Limit
	return &r, c.call(ctx, wire.VerbLimitsGet, wire.PatternRequest{Pattern: pattern}, &r)
}

// Limits are every stored limit, most specific pattern first.
func (c *Client) Limits(ctx context.Context) ([]wire.Limit, error) {
	var r wire.LimitsReply
	return r.Limits, c.call(ctx, wire.VerbLimitsList, nil, &r)
}

// DeleteLimit deletes the limit of pattern; none is a *wire.ServiceError
// matching wire.ErrNotFound. With WithRetry it is sent again only after
// no responders.
func (c *Client) DeleteLimit(ctx context.Context, pattern string) error {
	_, err := c.requestOnce(ctx, wire.VerbLimitsDelete, wire.PatternRequest{Pattern: pattern})
	return err
}

// Pause holds back every delivery of the subjects pattern matches, and
// returns the pattern's limit as it now stands.
func (c *Client) Pause(ctx context.Context, pattern string) (*wire.Limit, error) {
	var r wire.Limit
	return &r, c.call(ctx, wire.VerbPause, wire.PatternRequest{Pattern: pattern}, &r)
}

// Resume delivers a paused pattern's subjects again, in fire order.
func (c *Client) Resume(ctx context.Context, pattern string) (*wire.Limit, error) {
	var r wire.Limit
	return &r, c.call(ctx, wire.VerbResume, wire.PatternRequest{Pattern: pattern}, &r)
}

// ClusterStatus is what the nodes of a cluster answered to CLUSTER.STATUS.
type ClusterStatus struct {
	// Nodes are the answers, by node id.
	Nodes []wire.NodeStatus
	// Silent are the members, in the configurations the nodes answered
	// with, that did not answer, by node id.
	Silent []wire.ClusterPeer
}

// StatusGrace is how long ClusterStatus waits for the other members once
// a quorum of them answered, so that a member that is down does not cost
// the whole timeout.
const StatusGrace = 200 * time.Millisecond

// ClusterStatus asks every node of the cluster for its status and gathers
// the answers: until every member known from them answered, the client's
// timeout, or StatusGrace after a quorum answered. A service that is not
// a cluster's node does not answer: nats.ErrNoResponders.
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	subj := c.api + "." + wire.VerbClusterStatus
	inbox := c.nc.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, fmt.Errorf("request on %s: %w", subj, err)
	}
	got := map[string]wire.NodeStatus{}
	members := map[string]wire.ClusterPeer{}
	deadline := time.Now().Add(c.timeout)
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	graced := false
wait:
	for len(got) == 0 || len(got) < len(members) {
		select {
		case m := <-ch:
			if m.Header.Get("Status") == "503" && len(m.Data) == 0 {
				return nil, fmt.Errorf("nothing answers on %s: %w", subj, nats.ErrNoResponders)
			}
			var st wire.NodeStatus
			if err := json.Unmarshal(m.Data, &st); err != nil || st.ID == "" {
				continue
			}
			got[st.ID] = st
			for _, p := range st.Peers {
				members[p.ID] = p
			}
			if !graced && len(members) > 0 && len(got) >= len(members)/2+1 {
				graced = true
				timer.Reset(min(StatusGrace, time.Until(deadline)))
			}
		case <-timer.C:
			break wait
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("no answer on %s within %v: %w", subj, c.timeout, nats.ErrTimeout)
	}
	r := &ClusterStatus{}
	for _, st := range got {
		r.Nodes = append(r.Nodes, st)
	}
	slices.SortFunc(r.Nodes, func(a, b wire.NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	for id, p := range members {
		if _, ok := got[id]; !ok {
			r.Silent = append(r.Silent, p)
		}
	}
	slices.SortFunc(r.Silent, func(a, b wire.ClusterPeer) int { return strings.Compare(a.ID, b.ID) })
	return r, nil
}
