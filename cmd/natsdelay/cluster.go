package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"natsdelay/bridge/wire"
)

// clusterCmd groups the cluster commands. They use only the API: status
// gathers every node's answer to CLUSTER.STATUS, add and remove ask the
// leader.
type clusterCmd struct {
	Status clusterStatusCmd `cmd:"" help:"Print every node's own view: id, role, leader, term, commit and applied index."`
	Add    clusterAddCmd    `cmd:"" help:"Add a node as a voting member; the cluster must have a leader."`
	Remove clusterRemoveCmd `cmd:"" help:"Remove a member by its node id; the cluster must have a leader."`
	Certs  clusterCertsCmd  `cmd:"" help:"Make a CA for a cluster and a certificate per node, for mutual TLS on the cluster port (--cluster-tls-*)."`
}

// clusterStatusCmd prints what each node answers to CLUSTER.STATUS.
type clusterStatusCmd struct {
	apiFlags `embed:""`
}

func (c *clusterStatusCmd) check() error {
	var p problems
	c.checkAPI(&p)
	return p.err()
}

// Run asks every node for its status: one request, every answer that
// comes within --timeout, and no more once the nodes in the answers'
// configurations have all answered.
func (c *clusterStatusCmd) Run(e *env) error {
	cl, err := c.dial("cluster status", e)
	if err != nil {
		return err
	}
	defer cl.close()
	nodes, missing, err := cl.gatherStatus()
	if err != nil {
		return err
	}
	if c.JSON {
		b, err := json.MarshalIndent(nodes, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	return writeClusterStatus(e.stdout, nodes, missing)
}

// writeClusterStatus writes the table of cluster status: each node's
// answer, and each member that did not answer as "no answer".
func writeClusterStatus(w io.Writer, nodes []wire.NodeStatus, missing []wire.ClusterPeer) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tROLE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tPEERS")
	for _, p := range silentMembers(nodes) {
		fmt.Fprintf(tw, "%s\t%s\tno answer\t\t\t\t\t\n", p.ID, p.Addr)
	}
	for _, n := range nodes {
		ids := make([]string, len(n.Peers))
		for i, p := range n.Peers {
			ids[i] = p.ID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", n.ID, n.Addr, n.Role, orNone(n.LeaderID == "", "none", n.LeaderID),
			n.Term, n.CommitIndex, n.AppliedIndex, strings.Join(ids, ","))
	}
	for _, p := range missing {
		fmt.Fprintf(tw, "%s\t%s\tno answer\t-\t-\t-\t-\t-\n", p.ID, p.Addr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return trimLines(w, buf.Bytes())
}

// silentMembers are the members that the answering nodes list but that
// did not answer themselves: down, cut off, or stopped. They are shown,
// not dropped, so that a dead member stands out.
func silentMembers(nodes []wire.NodeStatus) []wire.ClusterPeer {
	answered := map[string]bool{}
	for _, n := range nodes {
		answered[n.ID] = true
	}
	var out []wire.ClusterPeer
	for _, n := range nodes {
		for _, p := range n.Peers {
			if !answered[p.ID] {
				answered[p.ID] = true
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b wire.ClusterPeer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// gatherStatus collects the nodes' answers to CLUSTER.STATUS, sorted by
// id, and the members in their configurations that did not answer: within
// --timeout, and no longer than statusGrace once a quorum of the members
// answered, so that a member that is down does not cost the whole timeout.
func (cl *client) gatherStatus() ([]wire.NodeStatus, []wire.ClusterPeer, error) {
	subj := cl.prefix + "." + wire.VerbClusterStatus
	inbox := cl.nc.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := cl.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := cl.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, nil, fmt.Errorf("request on %s: %w", subj, err)
	}
	got := map[string]wire.NodeStatus{}
	members := map[string]wire.ClusterPeer{}
	deadline := time.Now().Add(cl.timeout)
	timer := time.NewTimer(cl.timeout)
	defer timer.Stop()
	graced := false
wait:
	for len(got) == 0 || len(got) < len(members) {
		select {
		case m := <-ch:
			if isNoResponders(m) {
				return nil, nil, fmt.Errorf("nothing answers on %s: is natsdelay serve running there as a node of a cluster, with --api-prefix %s?", subj, cl.prefix)
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
				timer.Reset(min(statusGrace, time.Until(deadline)))
			}
		case <-timer.C:
			break wait
		}
	}
	if len(got) == 0 {
		return nil, nil, fmt.Errorf("no answer on %s within %v", subj, cl.timeout)
	}
	out := make([]wire.NodeStatus, 0, len(got))
	for _, st := range got {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b wire.NodeStatus) int { return strings.Compare(a.ID, b.ID) })
	var missing []wire.ClusterPeer
	for id, p := range members {
		if _, ok := got[id]; !ok {
			missing = append(missing, p)
		}
	}
	slices.SortFunc(missing, func(a, b wire.ClusterPeer) int { return strings.Compare(a.ID, b.ID) })
	return out, missing, nil
}

// statusGrace is how long cluster status waits for the other members once
// a quorum of them answered (as INFO does on the service).
const statusGrace = 200 * time.Millisecond

// isNoResponders reports whether m is the server's no-responders notice.
func isNoResponders(m *nats.Msg) bool {
	return m.Header.Get("Status") == "503" && len(m.Data) == 0
}

// clusterAddCmd adds a voting member.
type clusterAddCmd struct {
	apiFlags `embed:""`

	ID   string `arg:"" name:"node-id" help:"The new node's --node-id."`
	Addr string `arg:"" name:"address" help:"The new node's cluster address (its --cluster-advertise, or --cluster-listen)."`
}

func (c *clusterAddCmd) check() error {
	var p problems
	c.checkAPI(&p)
	if c.ID == "" {
		p.add(`node id "": want the new node's --node-id`)
	}
	checkHostPort(&p, "address", c.Addr, false)
	return p.err()
}

func (c *clusterAddCmd) Run(e *env) error {
	return c.change(e, "cluster add", wire.VerbClusterAdd, wire.ClusterAddRequest{ID: c.ID, Addr: c.Addr})
}

// clusterRemoveCmd removes a member.
type clusterRemoveCmd struct {
	apiFlags `embed:""`

	ID string `arg:"" name:"node-id" help:"The --node-id of the member to remove."`
}

func (c *clusterRemoveCmd) check() error {
	var p problems
	c.checkAPI(&p)
	if c.ID == "" {
		p.add(`node id "": want the --node-id of the member to remove`)
	}
	return p.err()
}

func (c *clusterRemoveCmd) Run(e *env) error {
	return c.change(e, "cluster remove", wire.VerbClusterRemove, wire.ClusterRemoveRequest{ID: c.ID})
}

// change sends a membership change to the leader and prints the members
// once it is committed.
func (c *apiFlags) change(e *env, name, verb string, req any) error {
	cl, err := c.dial(name, e)
	if err != nil {
		return err
	}
	defer cl.close()
	data, err := cl.call(verb, req)
	if err != nil {
		return err
	}
	if c.JSON {
		return printJSON(e.stdout, data)
	}
	var r wire.ClusterChangeReply
	if err := decodeReply(verb, data, &r); err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDRESS\tVOTER")
	for _, p := range r.Peers {
		fmt.Fprintf(tw, "%s\t%s\t%v\n", p.ID, p.Addr, p.Voter)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return trimLines(e.stdout, buf.Bytes())
}
