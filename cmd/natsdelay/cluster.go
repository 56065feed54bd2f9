package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/wire"
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

// gatherStatus collects the nodes' answers to CLUSTER.STATUS, sorted by
// id, and the members in their configurations that did not answer (see
// client.ClusterStatus).
func (cl *apiClient) gatherStatus() ([]wire.NodeStatus, []wire.ClusterPeer, error) {
	st, err := cl.api.ClusterStatus(context.Background())
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, nil, fmt.Errorf("nothing answers on %s.%s: is natsdelay serve running there as a node of a cluster, with --api-prefix %s?", cl.prefix, wire.VerbClusterStatus, cl.prefix)
	}
	if err != nil {
		return nil, nil, cl.explain(wire.VerbClusterStatus, err)
	}
	return st.Nodes, st.Silent, nil
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
	r, printed, err := askFor[wire.ClusterChangeReply](c, e, name, verb, req)
	if err != nil || printed {
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
