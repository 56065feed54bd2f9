package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/natsdelay/natsdelay/bridge/wire"
)

// infoCmd prints the service's version, counts, stats and configuration.
type infoCmd struct {
	apiFlags `embed:""`
}

func (c *infoCmd) check() error {
	var p problems
	c.checkAPI(&p)
	return p.err()
}

func (c *infoCmd) Run(e *env) error {
	r, printed, err := askFor[wire.InfoReply](&c.apiFlags, e, "info", wire.VerbInfo, nil)
	if err != nil || printed {
		return err
	}
	// The blank lines between the groups keep one tab, so that all the
	// groups share one column width; trimLines drops the padding it leaves.
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("version", r.Version)
	row("engine", r.Engine)
	row("storage", r.Storage)
	fmt.Fprintln(tw, "\t")
	row("pending", r.Counts.Pending)
	row("subjects", r.Counts.Subjects)
	row("in flight", r.Counts.InFlight)
	row("due now", r.Counts.DueNow)
	row("due within 1m", r.Counts.NextMinute)
	row("due within 1h", r.Counts.NextHour)
	row("due within 24h", r.Counts.NextDay)
	row("schedules", r.Counts.Schedules)
	row("dead letters kept", r.Counts.Dead)
	fmt.Fprintln(tw, "\t")
	st := r.Stats
	row("delivered", st.Delivered)
	row("redelivered", st.Redelivered)
	row("acked", st.Acked)
	row("nacked", st.Nacked)
	row("progress", st.Progress)
	row("termed", st.Termed)
	row("dead lettered", st.DeadLettered)
	row("expired", st.Expired)
	row("canceled", st.Canceled)
	row("no responders", st.NoResponders)
	row("undeliverable", st.Undeliverable)
	row("window evictions", st.Evicted)
	row("skipped", st.Skipped)
	fmt.Fprintln(tw, "\t")
	cf := r.Config
	row("ingest prefix", cf.IngestPrefix)
	row("ack prefix", cf.AckPrefix)
	row("api prefix", cf.APIPrefix)
	row("ack wait", cf.AckWait)
	row("max deliver", orNone(cf.MaxDeliver == 0, "unlimited", strconv.FormatUint(uint64(cf.MaxDeliver), 10)))
	row("backoff", orNone(len(cf.Backoff) == 0, "none", strings.Join(cf.Backoff, ",")))
	row("dead letter", orNone(cf.DeadLetterSubject == "", "none", cf.DeadLetterSubject))
	row("dead letter expired", cf.DeadLetterExpired)
	row("dead retention", cf.DeadRetention)
	row("time bucket", cf.TimeBucket)
	row("max payload", orNone(cf.MaxPayload == 0, "server's max_payload", strconv.Itoa(cf.MaxPayload)))
	if ci := r.Cluster; ci != nil {
		fmt.Fprintln(tw, "\t")
		row("node", ci.ID+" ("+ci.Role+")")
		row("leader", ci.LeaderID)
		row("term", ci.Term)
		row("commit index", ci.CommitIndex)
		row("applied index", ci.AppliedIndex)
		for _, p := range ci.Peers {
			row("peer "+p.ID, peerLine(p))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return trimLines(e.stdout, buf.Bytes())
}

// peerLine describes one member of a cluster on one line.
func peerLine(p wire.PeerInfo) string {
	s := p.Addr
	if !p.Voter {
		s += " non-voter"
	}
	if !p.Answered {
		return s + " no answer"
	}
	return fmt.Sprintf("%s %s applied %d lag %d", s, p.Role, p.AppliedIndex, *p.Lag)
}

// trimLines writes b to w without trailing spaces on its lines.
func trimLines(w io.Writer, b []byte) error {
	for line := range bytes.Lines(b) {
		if _, err := fmt.Fprintf(w, "%s\n", bytes.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	return nil
}

// orNone is alt when none holds, else v: a zero setting printed by its meaning.
func orNone(none bool, alt, v string) string {
	if none {
		return alt
	}
	return v
}
