package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"

	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/cmd/natsdelay/internal/server"
)

// subjects shows a paused subject as paused, by the pattern whose limit
// pauses it; --json has the pattern too.
func TestSubjects_ShowsThePause(t *testing.T) {
	t.Parallel()
	url := serveInProcess(t, t.TempDir()).URL()
	schedule(t, url, "shop.orders", "o1", "--delay", "1h")
	schedule(t, url, "shop.refunds", "r1", "--delay", "1h")
	runHere(t, "pause", "shop.>", "--nats", url)
	runHere(t, "limits", "set", "shop.refunds", "--max-in-flight", "5", "--nats", url)
	out := runHere(t, "subjects", "--nats", url)
	want := "SUBJECT       PENDING  DUE NOW  DEAD  HELD\n" +
		"shop.orders   1        0        0     paused by shop.>\n" +
		"shop.refunds  1        0        0     no\n"
	if !strings.HasPrefix(out, want) {
		t.Errorf("subjects printed\n%s\nwant\n%s", out, want)
	}
	var r wire.SubjectsReply
	if err := json.Unmarshal([]byte(runHere(t, "subjects", "--nats", url, "--json")), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Subjects) != 2 || r.Subjects[0].PausedBy != "shop.>" || r.Subjects[1].PausedBy != "" {
		t.Errorf("subjects --json: %+v, want shop.orders paused by shop.>, shop.refunds not", r.Subjects)
	}
}

// runHere runs the command args in this process and returns what it
// printed; it fails t unless it exits 0.
func runHere(t testing.TB, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(args, strings.NewReader(""), &out, &errOut); code != exitOK {
		t.Fatalf("natsdelay %s: exit %d\n%s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

// The console of a follower links to the leader's console, whose address
// the leader tells in its answer to CLUSTER.STATUS; the leader's own
// console links to no other.
func TestConsole_FollowerLinksTheLeader(t *testing.T) {
	t.Parallel()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	ns := natsserver.RunServer(&opts)
	t.Cleanup(ns.Shutdown)
	nodes := openCluster(t, ns.ClientURL(), "a", "b")
	base := map[string]string{}
	for id, n := range nodes {
		base[id] = "http://" + n.HTTPAddr()
	}
	link := regexp.MustCompile(`<a id="leader" href="([^"]+)">(\w+)</a>`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var links []string
		for id := range nodes {
			if m := link.FindStringSubmatch(overviewPage(t, base[id])); m != nil {
				links = append(links, fmt.Sprintf("%s->%s@%s", id, m[2], m[1]))
				if m[1] != base[m[2]]+"/ui/" || m[2] == id {
					t.Fatalf("node %s links the leader %s at %s, want %s/ui/", id, m[2], m[1], base[m[2]])
				}
			}
		}
		if len(links) == 1 {
			return
		}
		if len(links) > 1 || time.Now().After(deadline) {
			t.Fatalf("leader links: %v, want one, from the follower", links)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// overviewPage is the console's overview at base.
func overviewPage(t testing.TB, base string) string {
	t.Helper()
	res, err := http.Get(base + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// openCluster opens in this process one node of a fresh cluster for each
// id, on the NATS server at url, all at once (a fresh cluster bootstraps
// once every peer answers), and closes them when t ends.
func openCluster(t *testing.T, url string, ids ...string) map[string]*server.Server {
	t.Helper()
	addrs := make([]string, len(ids))
	for i := range ids {
		addrs[i] = freeAddr(t)
	}
	opts := make([]server.Options, len(ids))
	for i, id := range ids {
		c := parseServe(t, "serve", "--nats", url, "--data-dir", t.TempDir(), "--engine", "pebble", "--http", "127.0.0.1:0",
			"--cluster-listen", addrs[i], "--cluster-peers", strings.Join(addrs, ","), "--node-id", id)
		o, err := c.serverOptions(newLogger(io.Discard, "info", "text"))
		if err != nil {
			t.Fatal(err)
		}
		opts[i] = o
	}
	nodes := make([]*server.Server, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			nodes[i], errs[i] = server.Open(ctx, opts[i])
		})
	}
	wg.Wait()
	out := map[string]*server.Server{}
	for i, n := range nodes {
		if n != nil {
			t.Cleanup(func() { _ = n.Close() })
			out[ids[i]] = n
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %s: %v", ids[i], err)
		}
	}
	return out
}
