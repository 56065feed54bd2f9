//go:build unix

package bridge_test

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/natsdelay/natsdelay/bridge"
	"github.com/natsdelay/natsdelay/bridge/wire"
)

// cpuTime is the CPU time, user plus system, the whole process has used so
// far. The embedded nats-server runs in the same process, so its work for
// the service's probes counts too, as it would on a real host.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerMinute measures the CPU seconds the process spends per wall
// minute over window. The window is the measurement, not a wait for
// anything.
func cpuPerMinute(b *testing.B, window time.Duration) float64 {
	b.Helper()
	start, wall := cpuTime(b), time.Now()
	time.Sleep(window)
	used := cpuTime(b) - start
	return used.Seconds() / time.Since(wall).Minutes()
}

// scheduleDue sends n requests to schedule a message due now on subject,
// pipelined on one connection, and waits for every reply, so all n are
// committed when it returns.
func scheduleDue(b *testing.B, url, subject string, n int) {
	b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, n)
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) { replies <- m })
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	hdr := nats.Header{wire.HeaderDelay: []string{"0"}}
	for i := range n {
		m := &nats.Msg{Subject: wire.DefaultIngestPrefix + "." + subject, Reply: inbox, Header: hdr, Data: []byte(strconv.Itoa(i))}
		if err := nc.PublishMsg(m); err != nil {
			b.Fatal(err)
		}
	}
	timeout := time.After(time.Minute)
	for i := range n {
		select {
		case rep := <-replies:
			if code := rep.Header.Get(wire.HeaderServiceErrorCode); code != "" {
				b.Fatalf("schedule: error %s: %s", code, rep.Header.Get(wire.HeaderServiceError))
			}
		case <-timeout:
			b.Fatalf("only %d of %d schedule replies within a minute", i, n)
		}
	}
}

// BenchmarkIdleCPU_NoSubscribers measures what a large backlog costs while
// nobody listens on its subject. The protocol promises one publish per
// back-off per subject, so the process should stay close to idle rather
// than retrying the backlog in a loop. It reports the CPU seconds per wall
// minute with the backlog pending (cpu-s/min), the same for the same
// service with nothing pending, measured first in the same run
// (idle-cpu-s/min), and their ratio. It asserts nothing about timing.
func BenchmarkIdleCPU_NoSubscribers(b *testing.B) {
	const (
		backlog = 100_000
		window  = 2 * time.Second
	)
	s, url := benchService(b, nil)

	var idle, loaded, probes float64
	for i := 0; b.Loop(); i++ {
		idle += cpuPerMinute(b, window)

		subject := "idle.nobody." + strconv.Itoa(i)
		before := s.Stats().NoResponders
		scheduleDue(b, url, subject, backlog)
		// The window starts once the subject is known to have nobody, so
		// it measures the back-off, not the first pass.
		deadline := time.Now().Add(time.Minute)
		for s.Stats().NoResponders == before {
			if time.Now().After(deadline) {
				b.Fatal("no delivery bounced within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		bounced := s.Stats().NoResponders
		loaded += cpuPerMinute(b, window)
		probes += float64(s.Stats().NoResponders - bounced)

		// Each round's backlog stays pending; the next round's idle
		// baseline would include it, so the rounds are cleared of it by
		// giving the subject a subscriber that ACKs everything.
		drainSubject(b, s, url, subject, backlog)
	}
	n := float64(b.N)
	b.ReportMetric(loaded/n, "cpu-s/min")
	b.ReportMetric(idle/n, "idle-cpu-s/min")
	if idle > 0 {
		b.ReportMetric(loaded/idle, "x-idle")
	}
	// Bounces within the window: each is one probe publish.
	b.ReportMetric(probes/n, "probes/window")
}

// drainSubject subscribes to subject, ACKs every delivery, and waits until nothing
// is pending, so the next round starts idle.
func drainSubject(b *testing.B, s *bridge.Service, url, subject string, n int) {
	b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for bridge.Pending(s) != 0 {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d still pending after two minutes with a subscriber", bridge.Pending(s), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
