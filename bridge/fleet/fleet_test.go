package fleet_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/test"
	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge/fleet"
	"github.com/natsdelay/natsdelay/keys"
)

func TestSplit_EvenContiguousInOrder(t *testing.T) {
	got := fleet.Split([]string{"a", "b", "c"}, 256)
	want := map[string]string{"a": "0-85", "b": "86-170", "c": "171-255"}
	total := 0
	for cell, w := range want {
		if s := fleet.FormatRanges(got[cell]); s != w {
			t.Errorf("cell %s: %s, want %s", cell, s, w)
		}
		total += fleet.Count(got[cell])
	}
	if total != 256 {
		t.Errorf("%d partitions owned, want 256", total)
	}
	if s := fleet.FormatRanges(fleet.Split([]string{"a", "b"}, 1)["b"]); s != "none" {
		t.Errorf("a second cell of a one-partition fleet owns %s", s)
	}
}

func TestTagPartition_IsTheSubjectsPartition(t *testing.T) {
	for i := range 1000 {
		subject := fmt.Sprintf("orders.%d", i)
		k := keys.Make(subject, time.Now().UnixMilli(), 0, uint64(i))
		for _, n := range []int{1, 7, 256, 65536} {
			p, err := fleet.TagPartition(k.Tag(), n)
			if err != nil || p != fleet.Partition(subject, n) {
				t.Fatalf("%s in %d partitions: tag says %d (%v), subject %d", subject, n, p, err, fleet.Partition(subject, n))
			}
		}
	}
	for _, bad := range []string{"", "zz", k48("g")} {
		if _, err := fleet.TagPartition(bad, 256); err == nil {
			t.Errorf("tag %q: no error", bad)
		}
	}
}

func k48(c string) string {
	s := ""
	for range keys.TagLen {
		s += c
	}
	return s
}

func TestConfig_Validate_EveryBadField(t *testing.T) {
	err := fleet.Config{Cell: "a.b", Partitions: -1, Founders: []string{"x", "x"}, Heartbeat: -1}.Validate()
	for _, want := range []string{`cell "a.b"`, "partitions -1", `founding cell "x": given twice`, `cell "a.b" is not one of`, "Heartbeat (-1ns)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v: want it to say %q", err, want)
		}
	}
	if err := (fleet.Config{Cell: "a", Partitions: 2, Founders: []string{"a", "b", "c"}}).Validate(); err == nil {
		t.Error("three founders of two partitions: no error")
	}
}

func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	opts := natsserver.DefaultTestOptions
	opts.Port = -1
	srv := natsserver.RunServer(&opts)
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestPrepare_RecordKeptAndChecked checks the cell's record: a first cell
// with no fleet on its NATS creates it owning every partition, its record
// is read again at the next start, and a start that names another cell or
// another number of partitions on that data dir is refused.
func TestPrepare_RecordKeptAndChecked(t *testing.T) {
	nc := startNATS(t)
	dir := t.TempDir()
	cfg := fleet.Config{Cell: "a", Partitions: 16, DataDir: dir, JoinWait: 50 * time.Millisecond}
	rec, err := fleet.Prepare(nc, cfg)
	if err != nil || rec.Epoch != 1 || fleet.FormatRanges(rec.Owned) != "0-15" {
		t.Fatalf("first cell: %+v, %v", rec, err)
	}
	cfg.Partitions = 0
	again, err := fleet.Prepare(nc, cfg)
	if err != nil || fleet.FormatRanges(again.Owned) != "0-15" || again.Partitions != 16 {
		t.Fatalf("restart: %+v, %v", again, err)
	}
	for _, bad := range []fleet.Config{{Cell: "b", DataDir: dir}, {Cell: "a", Partitions: 32, DataDir: dir}} {
		if _, err := fleet.Prepare(nc, bad); !errors.Is(err, fleet.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", bad, err)
		}
	}
}
