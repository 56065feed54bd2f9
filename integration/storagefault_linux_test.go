package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
	"github.com/natsdelay/natsdelay/delaystore"
	"github.com/natsdelay/natsdelay/delaystore/boltstore"
	storeengine "github.com/natsdelay/natsdelay/delaystore/engine"
	"github.com/natsdelay/natsdelay/delaystore/pebblestore"
	"github.com/natsdelay/natsdelay/keys"
)

// ledger records, by the X-Id header the test gives every message, what
// the service answered and what it delivered.
type ledger struct {
	mu        sync.Mutex
	acked     map[string]bool // ingest answered with a success
	refused   map[string]bool // ingest answered 503
	delivered map[string]int  // deliveries seen
	texts     []string        // the 503 texts, in order
}

const idHeader = "X-Id"

func newLedger() *ledger {
	return &ledger{acked: map[string]bool{}, refused: map[string]bool{}, delivered: map[string]int{}}
}

// consume subscribes to subject, records every delivery in l and ACKs it
// without asking for a confirmation: an ACK lost to a storage fault only
// causes a redelivery.
func (l *ledger) consume(tb testing.TB, nc *nats.Conn, subject string) {
	tb.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		l.mu.Lock()
		l.delivered[m.Header.Get(idHeader)]++
		l.mu.Unlock()
		_ = m.Respond([]byte("+ACK"))
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// send schedules n messages named <phase>-<i> on subject, all at once,
// and records each answer. It returns how many were refused with a 503;
// any other error fails tb.
func (l *ledger) send(tb testing.TB, nc *nats.Conn, subject, phase string, n int, payload []byte, hdr ...string) (refused int) {
	tb.Helper()
	msgs := make([]*nats.Msg, n)
	ids := make([]string, n)
	for i := range msgs {
		ids[i] = fmt.Sprintf("%s-%d", phase, i)
		msgs[i] = newMsg(subject, "", append([]string{idHeader, ids[i]}, hdr...)...)
		msgs[i].Data = payload
	}
	reps := requestMany(tb, nc, msgs)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, rep := range reps {
		switch code := rep.Header.Get(wire.HeaderServiceErrorCode); code {
		case "":
			l.acked[ids[i]] = true
		case "503":
			l.refused[ids[i]] = true
			l.texts = append(l.texts, rep.Header.Get(wire.HeaderServiceError))
			refused++
		default:
			tb.Fatalf("%s: error %s: %s", ids[i], code, rep.Header.Get(wire.HeaderServiceError))
		}
	}
	return refused
}

// lastText is the latest 503 text.
func (l *ledger) lastText() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.texts) == 0 {
		return ""
	}
	return l.texts[len(l.texts)-1]
}

// waitSettled waits until every acknowledged message was delivered and
// INFO counts nothing pending any more, then checks that LIST, which reads
// the stored messages themselves, finds none of subject, and returns the
// refused messages that were delivered.
func (l *ledger) waitSettled(tb testing.TB, svc *bridge.Service, nc *nats.Conn, subject string) (refusedDelivered []string) {
	tb.Helper()
	checkFor(tb, 3*wait, 10*time.Millisecond, func() error {
		l.mu.Lock()
		var missing []string
		for id := range l.acked {
			if l.delivered[id] == 0 {
				missing = append(missing, id)
			}
		}
		l.mu.Unlock()
		if len(missing) > 0 {
			slices.Sort(missing)
			return fmt.Errorf("%d acknowledged messages not delivered: %v", len(missing), missing[:min(len(missing), 10)])
		}
		if err := svc.Ready(); err != nil {
			return err
		}
		p, err := pendingCount(nc)
		if err == nil && p != 0 {
			err = fmt.Errorf("%d messages still pending", p)
		}
		return err
	})
	// The pending count is kept in the same batches as the messages; a
	// message left in the store without its count would be stranded.
	var left []string
	for m, err := range api(nc).List(context.Background(), wire.ListRequest{Subject: subject}) {
		if err != nil {
			tb.Fatalf("LIST %s after settling: %v", subject, err)
		}
		left = append(left, m.Tag)
	}
	if len(left) != 0 {
		tb.Fatalf("after settling, the store holds %d messages of %s, want none: %v", len(left), subject, left[:min(len(left), 10)])
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, n := range l.delivered {
		switch {
		case l.acked[id]:
		case l.refused[id]:
			refusedDelivered = append(refusedDelivered, id)
		default:
			tb.Errorf("delivered %q (%d times), which was never sent", id, n)
		}
	}
	slices.Sort(refusedDelivered)
	return refusedDelivered
}

// requestOne sends one ingest request and returns its error code and text.
func requestOne(tb testing.TB, nc *nats.Conn, m *nats.Msg) (code, text string) {
	tb.Helper()
	rep, err := nc.RequestMsg(m, wait)
	if err != nil {
		tb.Fatalf("request %s: %v", m.Subject, err)
	}
	return rep.Header.Get(wire.HeaderServiceErrorCode), rep.Header.Get(wire.HeaderServiceError)
}

// faultyStore is an engine on disk whose writes the test can make fail.
type faultyStore struct {
	// open opens the store in dir, again after a fault; faults that are on
	// reach the files it opens.
	open func() (delaystore.Store, error)
	on   func()
	off  func()
	// injected counts the faults injected so far.
	injected func() int64
	// unwritten is set when a refused batch can never have reached the
	// file, so it must never be delivered; otherwise (a failed fsync) it
	// may survive whole.
	unwritten bool
}

// pebbleWALFaults is Pebble on dir with its WAL writes or syncs failing
// while on, through errorfs. MANIFEST, OPTIONS and sstables are left alone.
func pebbleWALFaults(tb testing.TB, dir string, kinds ...errorfs.OpKind) faultyStore {
	var n atomic.Int64
	toggle := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && slices.Contains(kinds, op.Kind) {
			n.Add(1)
			return errorfs.ErrInjected
		}
		return nil
	})}
	fs := errorfs.Wrap(vfs.Default, toggle)
	log := testLogger(tb)
	return faultyStore{
		open: func() (delaystore.Store, error) {
			return pebblestore.Open(pebblestore.Config{Dir: dir, FS: fs, Logger: log})
		},
		on: toggle.On, off: toggle.Off, injected: n.Load,
		unwritten: !slices.Contains(kinds, errorfs.OpFileSync),
	}
}

// boltFaults is bbolt in dir whose file descriptors, while on, are made
// read-only under it, so every write fails with EBADF while reads and the
// memory map carry on: the files open when the fault starts, and any opened
// while it lasts.
func boltFaults(tb testing.TB, dir string) faultyStore {
	var (
		mu       sync.Mutex
		on       bool
		files    []*os.File
		injected atomic.Int64
	)
	readOnly := func(f *os.File) {
		ro, err := syscall.Open(f.Name(), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			tb.Errorf("fault: %v", err)
			return
		}
		// NB: this closes the original descriptor under bbolt, and with it
		// its flock; the file stays open, read-only, at the same number.
		if err := syscall.Dup3(ro, int(f.Fd()), syscall.O_CLOEXEC); err != nil {
			tb.Errorf("fault: %v", err)
		}
		_ = syscall.Close(ro)
		injected.Add(1)
	}
	openFile := func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		files = append(files, f)
		if on {
			readOnly(f)
		}
		return f, nil
	}
	log := testLogger(tb)
	return faultyStore{
		open: func() (delaystore.Store, error) {
			return boltstore.Open(boltstore.Config{Path: filepath.Join(dir, "natsdelay.db"), OpenFile: openFile, Logger: log})
		},
		on: func() {
			mu.Lock()
			defer mu.Unlock()
			on = true
			for _, f := range files {
				readOnly(f)
			}
			files = nil
		},
		off: func() {
			mu.Lock()
			defer mu.Unlock()
			on = false
		},
		injected:  injected.Load,
		unwritten: true,
	}
}

// TestStorageFault_WriteErrors_RecoverAndLoseNothing checks, through a real
// service on a real embedded nats-server and a store on disk, what a
// failing disk may and may not do: while WAL writes or syncs (Pebble) or
// file writes (bbolt) fail, every ingest gets 503 "storage failing" and
// never a success, the service reports unready, ack syncs get 503; once the
// fault clears, the service becomes ready again by itself, new ingests
// succeed, and every message acknowledged before or after the fault is
// delivered and settled. A refused message is delivered only when its
// batch survived whole (after a failed fsync); after a failed write, never.
func TestStorageFault_WriteErrors_RecoverAndLoseNothing(t *testing.T) {
	cases := []struct {
		name string
		fs   func(tb testing.TB, dir string) faultyStore
	}{
		{"pebble-wal-write", func(tb testing.TB, dir string) faultyStore {
			return pebbleWALFaults(tb, dir, errorfs.OpFileWrite, errorfs.OpFileWriteAt)
		}},
		{"pebble-wal-sync", func(tb testing.TB, dir string) faultyStore {
			return pebbleWALFaults(tb, dir, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
		}},
		{"bolt-write", boltFaults},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runWriteFault(t, c.fs(t, t.TempDir()))
		})
	}
}

func runWriteFault(t *testing.T, fs faultyStore) {
	const subject = "faults.write"
	srv := startServer(t)
	nc := connect(t, srv)
	l := newLedger()
	l.consume(t, nc, subject)
	st, err := fs.open()
	if err != nil {
		t.Fatal(err)
	}
	svc := startService(t, srv, st, func(c *bridge.Config) {
		c.ReopenBackoff = 5 * time.Millisecond
		c.ReopenMaxBackoff = 50 * time.Millisecond
	}, bridge.WithReopen(fs.open))

	// Before the fault: some delivered and ACKed, some still pending.
	if n := l.send(t, nc, subject, "before", 20, []byte("b")); n != 0 {
		t.Fatalf("%d refused before the fault", n)
	}
	if n := l.send(t, nc, subject, "later", 10, []byte("l"), "Delay", "300ms"); n != 0 {
		t.Fatalf("%d refused before the fault", n)
	}
	checkFor(t, wait, 5*time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.delivered["before-0"] == 0 {
			return fmt.Errorf("before-0 not delivered yet")
		}
		return nil
	})
	// Any tag will do: while the store is failing, no answer is applied.
	aTag := keys.New(keys.TopicHash(subject), 1, 1).Tag()

	fs.on()
	// One at a time, so each is a batch of its own.
	for i := range 5 {
		m := newMsg(subject, "f", idHeader, fmt.Sprintf("fault-%d", i))
		code, text := requestOne(t, nc, m)
		l.mu.Lock()
		if code == "" {
			l.acked[m.Header.Get(idHeader)] = true
		} else {
			l.refused[m.Header.Get(idHeader)] = true
		}
		l.mu.Unlock()
		if code != "503" || !strings.Contains(text, "storage failing") {
			t.Fatalf("ingest %d under the fault: code %q, text %q; want 503 storage failing", i, code, text)
		}
		if i > 0 && !strings.HasSuffix(text, "; recovering") {
			t.Fatalf("ingest %d after the store failed: %q, want it to end in \"; recovering\"", i, text)
		}
		t.Logf("under the fault: 503 %s", text)
	}
	if err := svc.Ready(); err == nil || !strings.Contains(err.Error(), "storage failing") {
		t.Fatalf("Ready under the fault = %v, want storage failing", err)
	}
	// An ack sync cannot be applied: 503, not +OK.
	rep, err := nc.Request(wire.DefaultAckPrefix+"."+aTag, []byte("+ACK"), wait)
	if err != nil {
		t.Fatal(err)
	}
	if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "503" || !strings.Contains(rep.Header.Get(wire.HeaderServiceError), "storage failing") {
		t.Fatalf("ack sync under the fault: %q %q, want 503 storage failing", rep.Data, rep.Header)
	}
	info, err := nc.Request(wire.DefaultAPIPrefix+".INFO", nil, wait)
	if err != nil || !strings.Contains(string(info.Data), `"storage":"failing: `) {
		t.Fatalf("INFO under the fault: %s, %v; want storage failing", info.Data, err)
	}
	// Many at once, so the writer batches them.
	if n := l.send(t, nc, subject, "burst", 30, []byte("x")); n != 30 {
		t.Fatalf("burst under the fault: %d of 30 refused; a success was given for a message on a failing disk", n)
	}
	// Wait for a reopen to meet the fault too: a store that opens on a
	// disk that still fails must not take the service back to ready.
	checkFor(t, wait, 5*time.Millisecond, func() error {
		if n := fs.injected(); n < 2 {
			return fmt.Errorf("%d faults injected, want a second one, in a reopen", n)
		}
		return nil
	})
	if err := svc.Ready(); err == nil {
		t.Fatal("ready again while the fault lasts")
	}
	if code, text := requestOne(t, nc, newMsg(subject, "f", idHeader, "fault-late")); code != "503" {
		t.Fatalf("ingest after a failed reopen: code %q, text %q; want 503", code, text)
	} else {
		l.mu.Lock()
		l.refused["fault-late"] = true
		l.mu.Unlock()
	}
	injected := fs.injected()

	fs.off()
	checkFor(t, wait, 5*time.Millisecond, svc.Ready)
	if n := l.send(t, nc, subject, "after", 20, []byte("a")); n != 0 {
		t.Fatalf("%d refused after recovery: %s", n, l.lastText())
	}
	survived := l.waitSettled(t, svc, nc, subject)
	switch {
	case len(survived) == 0:
	case fs.unwritten:
		t.Fatalf("refused messages whose write failed were delivered: %v", survived)
	default:
		t.Logf("refused messages whose batch survived the failed fsync, whole, and were delivered: %v", survived)
	}
	l.mu.Lock()
	t.Logf("faults injected: %d; acknowledged %d, refused %d, all acknowledged delivered; lost 0",
		injected, len(l.acked), len(l.refused))
	l.mu.Unlock()
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, unmounted
// when tb ends, after everything registered with tb.Cleanup later. It skips
// tb where mounting is not allowed.
func mountTmpfs(tb testing.TB, size int64) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o750); err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if errors.Is(err, syscall.EPERM) {
			tb.Skipf("mounting a tmpfs needs CAP_SYS_ADMIN (root): %v", err)
		}
		tb.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a ballast file into dir that leaves about room bytes
// free, and returns its path.
func fillDisk(tb testing.TB, dir string, room int64) string {
	tb.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		tb.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for left := free - room; left > 0; left -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			tb.Fatalf("writing the ballast: %v", err)
		}
	}
	return path
}

// TestStorageFault_FullDisk_RecoversWhenSpaceReturns checks, on a real full
// disk (a small tmpfs) under a real service and embedded nats-server, that
// a full disk behaves like any failing write: once it fills, ingest
// answers 503 "storage failing ... no space left on device", and no
// message gets a success reply unless it was stored; when space returns
// (the ballast is deleted) the service recovers by itself, maybe after
// failed reopens, new ingests succeed, and every acknowledged message is
// delivered and settled, with nothing stranded in the store.
//
// While the disk stays full the service must stay recovering, not flap:
// the store failed once, every reopen is refused (the engine wants free
// space at Open), /readyz and natsdelay_store_recovering say so, and no
// ingest is acknowledged. bbolt used to reopen on the full disk, commit a
// few small batches into its free pages and fail again, in a loop.
func TestStorageFault_FullDisk_RecoversWhenSpaceReturns(t *testing.T) {
	for _, name := range []string{storeengine.Pebble, storeengine.Bolt} {
		t.Run(name, func(t *testing.T) {
			dir := mountTmpfs(t, 16<<20)
			log := testLogger(t)
			open := func() (delaystore.Store, error) {
				return storeengine.Open(storeengine.Config{Engine: name, Dir: dir, Pebble: pebblestore.Config{DiskFullReserve: 1 << 20}, Bolt: boltstore.Config{MinFree: 1 << 20}, Logger: log})
			}
			runFullDisk(t, dir, open)
		})
	}
}

func runFullDisk(t *testing.T, dir string, open func() (delaystore.Store, error)) {
	const subject = "faults.disk"
	srv := startServer(t)
	nc := connect(t, srv)
	l := newLedger()
	l.consume(t, nc, subject)
	st, err := open()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc := startService(t, srv, st, func(c *bridge.Config) {
		c.ReopenBackoff = 5 * time.Millisecond
		c.ReopenMaxBackoff = 50 * time.Millisecond
	}, bridge.WithReopen(open), bridge.WithRegisterer(reg))
	if n := l.send(t, nc, subject, "before", 20, []byte("b")); n != 0 {
		t.Fatalf("%d refused before the disk filled", n)
	}

	ballast := fillDisk(t, dir, 512<<10)
	payload := make([]byte, 4<<10)
	rounds := 0
	for ; ; rounds++ {
		if rounds == 100 {
			t.Fatal("the disk never filled: 100 rounds of 50 messages of 4 KiB all stored")
		}
		if l.send(t, nc, subject, fmt.Sprintf("fill%d", rounds), 50, payload) > 0 {
			break
		}
	}
	text := l.lastText()
	if !strings.Contains(text, "storage failing") || !strings.Contains(text, "no space left on device") {
		t.Fatalf("ingest on a full disk: %q, want storage failing ... no space left on device", text)
	}
	t.Logf("the disk filled after %d rounds: 503 %s", rounds+1, text)
	// Still full: the service keeps trying to reopen the store, is refused
	// each time, and stays recovering.
	checkFor(t, wait, 5*time.Millisecond, func() error {
		if n := gauge(t, reg, "natsdelay_store_reopen_failures_total"); n < 3 {
			return fmt.Errorf("%v reopens refused, want 3", n)
		}
		return nil
	})
	if n := l.send(t, nc, subject, "full", 20, payload); n != 20 {
		t.Fatalf("%d of 20 ingests acknowledged on a full disk, want none: the store was reopened while full", 20-n)
	}
	if n := gauge(t, reg, "natsdelay_store_failures_total"); n != 1 {
		t.Fatalf("natsdelay_store_failures_total = %v while the disk stayed full, want 1: the store flapped", n)
	}
	if v := gauge(t, reg, "natsdelay_store_recovering"); v != 1 {
		t.Fatalf("natsdelay_store_recovering = %v while the disk is full, want 1", v)
	}
	if err := svc.Ready(); err == nil || !strings.Contains(err.Error(), "storage failing") {
		t.Fatalf("Ready() = %v while the disk is full, want storage failing", err)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	// The first commit after space returns may still meet an error the
	// engine kept from the full disk, and fail the store once more.
	probes := 0
	checkFor(t, wait, 5*time.Millisecond, func() error {
		probes++
		code, text := requestOne(t, nc, newMsg(subject, "p", idHeader, fmt.Sprintf("probe-%d", probes)))
		l.mu.Lock()
		defer l.mu.Unlock()
		if code == "" {
			l.acked[fmt.Sprintf("probe-%d", probes)] = true
			return nil
		}
		l.refused[fmt.Sprintf("probe-%d", probes)] = true
		return fmt.Errorf("ingest after space returned: %s %s", code, text)
	})
	if n := l.send(t, nc, subject, "after", 20, []byte("a")); n != 0 {
		t.Fatalf("%d refused after recovery: %s", n, l.lastText())
	}
	survived := l.waitSettled(t, svc, nc, subject)
	if len(survived) > 0 {
		t.Logf("refused messages whose batch reached the disk whole before the failure, and were delivered: %v", survived)
	}
	l.mu.Lock()
	t.Logf("acknowledged %d, refused %d, probes after space returned %d; all acknowledged delivered; lost 0",
		len(l.acked), len(l.refused), probes)
	l.mu.Unlock()
}

// gauge returns the value of the unlabelled counter or gauge name in reg,
// failing tb if reg does not have it.
func gauge(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
	}
	tb.Fatalf("no metric %s", name)
	return 0
}
