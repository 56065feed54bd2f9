package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints res as one table per phase, natsdelay beside
// JetStream (and the core baseline for ingest). Its header says how
// durable each system's reply is. Every compared row says which way is
// better (higher or lower) and whether natsdelay is better or worse, and
// by how many times, so no ratio needs reading against its row.
func WriteTable(w io.Writer, res *Results) error {
	c := res.Config
	writeHeading(w, res)
	// The rows end in a tab, so their last column is aligned too, and
	// tabwriter pads it with trailing spaces: trimLines drops them.
	t := &trimLines{w: w}
	tw := tabwriter.NewWriter(t, 0, 0, 2, ' ', 0)
	// p("") ends a table: a blank line, and a flush, so that the next
	// table's columns get widths of their own.
	p := func(format string, args ...any) {
		if format == "" {
			fmt.Fprintln(tw)
			_ = tw.Flush()
			return
		}
		fmt.Fprintf(tw, format+"\n", args...)
	}

	writeIngest(p, res)
	writeFire(p, res)
	writeEndToEnd(p, res)
	writeScale(p, c, res.Scale)
	writeExpiry(p, c, res.Expiry)
	if wv := res.Waves; wv != nil {
		writeWaves(p, wv)
	}
	if rr := res.Recurring; rr != nil {
		writeRecurring(p, rr)
	}
	if fr := res.Flow; fr != nil {
		writeFlow(p, fr, c.OwnProcess)
	}
	if er := res.Events; er != nil {
		writeEvents(p, er, c.OwnProcess)
	}
	if fr := res.Floor; fr != nil {
		writeFloor(p, fr, c.ServerProcess)
	}
	if cr := res.Cluster; cr != nil {
		writeCluster(p, c, cr)
	}
	if cr := res.Cells; cr != nil {
		writeCells(p, c, cr)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return t.flush()
}

// writeHeading prints what the run was on and how to read the tables.
func writeHeading(w io.Writer, res *Results) {
	c := res.Config
	fmt.Fprintf(w, "natsdelay-bench: %s, %d cores, %s, nats-server %s (%s), %d-byte payloads\n", orDash(res.Host.CPU), res.Host.Cores,
		res.Host.GoVersion, res.Host.NATS, map[bool]string{true: "embedded", false: "external"}[res.Host.Embedded], c.PayloadSize)
	steal := "-"
	if res.Host.StealPct >= 0 {
		steal = fmt.Sprintf("%.1f%%", res.Host.StealPct)
	}
	fmt.Fprintf(w, "load average before %s, after %s; CPU steal %s; %.0f s in all\n", orDash(res.Host.LoadBefore), orDash(res.Host.LoadAfter), steal, res.Seconds)
	fmt.Fprintf(w, "durability: natsdelay replies to a schedule only after the fsync of the batch that holds it;\n  %s\n", jsDurability(res.JetStreamSync))
	fmt.Fprintf(w, "ratios: natsdelay against the other system, \"Nx better\" or \"Nx worse\" by the row's better column (%s msgs/s, %s lateness), \"same\" within rounding\n", higher, lower)
	fmt.Fprintf(w, "%s\n\n", cpuNote)
}

// writeIngest prints the ingest table: natsdelay's rate and CPU beside
// JetStream's and the core request/reply baseline's.
func writeIngest(p func(string, ...any), res *Results) {
	if len(res.Ingest) == 0 {
		return
	}
	c := res.Config
	p("ingest (acked scheduling, %d msgs)\tbetter\tnatsdelay msgs/s\tjetstream msgs/s\tnatsdelay vs jetstream\tcore req/reply msgs/s\tnatsdelay vs core\t", c.IngestMsgs)
	for _, mode := range []string{"pipelined", "requesters"} {
		d, j, b := ingestRate(res, SystemDelay, mode), ingestRate(res, SystemJS, mode), ingestRate(res, SystemCore, mode)
		p("%s\t%s\t%s\t%s\t%s\t%s\t%s\t", ingestLabel(c, mode), higher, num(d), num(j), versus(d, j, higher), num(b), versus(d, b, higher))
	}
	for _, mode := range []string{"pipelined", "requesters"} {
		d, j, b := ingestCPU(res, SystemDelay, mode), ingestCPU(res, SystemJS, mode), ingestCPU(res, SystemCore, mode)
		p("%s: %s\t%s\t%s\t%s\t%s\t%s\t%s\t", ingestLabel(c, mode), cpuLabel(c.OwnProcess, c.ServerProcess), lower, dec(d), dec(j), versus(d, j, lower), dec(b), versus(d, b, lower))
		dr, jr, br := ingestRun(res, SystemDelay, mode), ingestRun(res, SystemJS, mode), ingestRun(res, SystemCore, mode)
		if c.OwnProcess {
			p("%s: CPU µs/msg, natsdelay process\t%s\t%s\t\t\t\t\t", ingestLabel(c, mode), lower, dec(perMsgUs(dr.CPU.Service, dr.Msgs)))
		}
		if c.ServerProcess {
			ds, js, bs := perMsgUs(dr.CPU.Server, dr.Msgs), perMsgUs(jr.CPU.Server, jr.Msgs), perMsgUs(br.CPU.Server, br.Msgs)
			p("%s: CPU µs/msg, nats-server process\t%s\t%s\t%s\t%s\t%s\t%s\t", ingestLabel(c, mode), lower, dec(ds), dec(js), versus(ds, js, lower), dec(bs), versus(ds, bs, lower))
		}
	}
	p("")
}

// writeFire prints a table per fire rate: lateness, deliveries and CPU of
// both systems.
func writeFire(p func(string, ...any), res *Results) {
	c := res.Config
	for _, rate := range c.FireRates {
		d, j := fireFor(res, SystemDelay, rate), fireFor(res, SystemJS, rate)
		if d == nil || j == nil {
			continue
		}
		p("fire: %d msgs offered at %s/s\tbetter\tnatsdelay\tjetstream\tnatsdelay vs jetstream\t", c.FireMsgs, num(rate))
		for _, row := range []struct {
			name string
			d, j float64
		}{
			{"lateness p50 ms", d.P50Ms, j.P50Ms}, {"lateness p90 ms", d.P90Ms, j.P90Ms},
			{"lateness p99 ms", d.P99Ms, j.P99Ms}, {"lateness max ms", d.MaxMs, j.MaxMs},
		} {
			p("%s\t%s\t%s\t%s\t%s\t", row.name, lower, dec(row.d), dec(row.j), versus(row.d, row.j, lower))
		}
		p("early\t\t%d\t%d\t\t", d.Early, j.Early)
		p("delivered\t\t%d\t%d\t\t", d.Delivered, j.Delivered)
		p("delivered msgs/s\t%s\t%s\t%s\t%s\t", higher, num(d.DeliveredRate), num(j.DeliveredRate), versus(d.DeliveredRate, j.DeliveredRate, higher))
		writeSplitCPU(p, d.CPU, j.CPU, d.Scheduled, j.Scheduled, c.OwnProcess, c.ServerProcess)
		if d.LeadMissed || j.LeadMissed {
			p("ingest overran the %.0f ms lead\t\t%v\t%v\t\t", c.FireLeadMs, d.LeadMissed, j.LeadMissed)
		}
		p("")
	}
}

// writeEndToEnd prints the end-to-end run of both systems.
func writeEndToEnd(p func(string, ...any), res *Results) {
	if len(res.EndToEnd) != 2 {
		return
	}
	c := res.Config
	d, j := res.EndToEnd[0], res.EndToEnd[1]
	p("end to end: %d due-now msgs scheduled+delivered+ACKed\tbetter\tnatsdelay\tjetstream\tnatsdelay vs jetstream\t", c.EndToEndMsgs)
	p("msgs/s\t%s\t%s\t%s\t%s\t", higher, num(d.Rate), num(j.Rate), versus(d.Rate, j.Rate, higher))
	writeSplitCPU(p, d.CPU, j.CPU, d.Msgs, j.Msgs, c.OwnProcess, c.ServerProcess)
	p("")
}

// writeScale prints natsdelay's run with many messages pending, if s is
// not nil.
func writeScale(p func(string, ...any), c ConfigSummary, s *ScaleResult) {
	if s == nil {
		return
	}
	p("scale: natsdelay with %s pending on %s\twith 0 pending\twith %s pending\t\t", num(float64(s.Pending)), plural(s.Subjects, "subject"), num(float64(s.Pending)))
	p("fill rate msgs/s\t\t%s\t\t", num(s.FillRate))
	writeCPURows(p, "fill ", s.FillCPU, s.Pending, s.OwnProcess, "\t\t%s\t\t")
	if s.OwnProcess {
		p("natsdelay process RSS MiB\t%s\t%s\t\t", dec(mib(s.RSSEmpty)), dec(mib(s.RSSBytes)))
		p("natsdelay process peak RSS MiB\t\t%s\t\t", dec(mib(s.RSSPeak)))
	} else {
		p("bench process RSS MiB (natsdelay in it)\t%s\t%s\t\t", dec(mib(s.RSSEmpty)), dec(mib(s.RSSBytes)))
	}
	if s.MemEmpty.HeapBytes >= 0 && s.MemPending.HeapBytes >= 0 {
		p("natsdelay Go heap MiB, live after a GC\t%s\t%s\t\t", dec(mib(s.MemEmpty.HeapBytes)), dec(mib(s.MemPending.HeapBytes)))
	}
	p("dispatcher subjects (natsdelay_dispatch_subjects)\t%s\t%s\t\t", count(s.MemEmpty.DispatchSubjects), count(s.MemPending.DispatchSubjects))
	per := func(name string, n int) {
		rss, heap := num(growth(s.RSSEmpty, s.RSSBytes, n)), num(growth(s.MemEmpty.HeapBytes, s.MemPending.HeapBytes, n))
		if n < minGrowthItems {
			rss, heap = tooFew(n), tooFew(n)
		}
		p("RSS growth per %s, bytes\t\t%s\t\t", name, rss)
		if s.MemEmpty.HeapBytes >= 0 && s.MemPending.HeapBytes >= 0 {
			p("Go heap growth per %s, bytes\t\t%s\t\t", name, heap)
		}
	}
	per("pending message", s.Pending)
	// With one subject, growth per subject is growth in all.
	if s.Subjects > 1 && s.Subjects != s.Pending {
		per("subject", s.Subjects)
	}
	p("data dir on disk MiB\t\t%s\t\t", dec(mib(s.DiskBytes)))
	p("restart to first delivery ms\t\t%s\t\t", dec(s.RestartMs))
	p("INFO ms, slowest of 3\t%s\t%s\t\t", dec(s.InfoEmptyMs), dec(s.InfoMs))
	p("due set of %d, the run of median p99 of %d: lateness p50 ms\t%s\t%s\t\t", c.ScaleDue, c.ScaleDueRuns, dec(s.DueEmpty.P50Ms), dec(s.DuePending.P50Ms))
	p("lateness p99 ms\t%s\t%s\t\t", dec(s.DueEmpty.P99Ms), dec(s.DuePending.P99Ms))
	p("lateness max ms\t%s\t%s\t\t", dec(s.DueEmpty.MaxMs), dec(s.DuePending.MaxMs))
	p("lateness p99 ms of each run\t%s\t%s\t\t", decs(s.DueEmptyP99s), decs(s.DuePendingP99s))
	settled := dec(s.SettleS)
	if s.SettleS < 0 {
		settled = "not idle within " + settleLimit.String()
	}
	p("s until idle after the fill, before the due set\t\t%s\t\t", settled)
	p("")
}

// writeExpiry prints the expiry run, if x is not nil.
func writeExpiry(p func(string, ...any), c ConfigSummary, x *ExpiryResult) {
	if x == nil {
		return
	}
	p("expiry: natsdelay, %s expired beside %s pending\t\t\t\t", num(float64(x.Expired)), num(float64(x.Pending)))
	p("delivered, unACKed, before expiry\t\t%s\t\t", num(float64(x.InFlight)))
	p("ms from expiry until removed (janitor interval %s)\t\t%s\t\t", c.ExpiryInterval, dec(x.Ms))
	p("")
}

// cpuBench labels the rows of the bench process's CPU time, which holds
// natsdelay in the ingest, fire and end-to-end phases; cpuNote says so.
const (
	cpuBench = "CPU µs/msg, whole bench process"
	cpuNote  = "CPU: user+system time per message from /proc/<pid>/stat (10 ms ticks). Ingest, fire and end to end run natsdelay\n" +
		"  inside the bench process, beside the embedded nats-server and the clients, so their figure is that whole process\n" +
		"  for either system, unless --own-process; scale and waves run natsdelay as its own process, counted apart from\n" +
		"  the bench process (nats-server and clients, unless --nats-pid names the server's own process)"
)

// cpuLabel names what the bench process's CPU time holds: natsdelay
// unless it ran as its own process (own), the server unless it ran as its
// own process the bench could read (srv).
func cpuLabel(own, srv bool) string {
	switch {
	case own && srv:
		return "CPU µs/msg, bench process (clients)"
	case own:
		return "CPU µs/msg, bench process (nats-server, clients)"
	}
	return cpuBench
}

// writeSplitCPU prints the CPU rows of a fire or end-to-end table: the
// bench process, and natsdelay's and the server's processes where they
// ran apart, and for natsdelay the sum of what the run cost.
func writeSplitCPU(p func(string, ...any), d, j CPU, dn, jn int, own, srv bool) {
	dc, jc := perMsgUs(d.Bench, dn), perMsgUs(j.Bench, jn)
	p("%s\t%s\t%s\t%s\t%s\t", cpuLabel(own, srv), lower, dec(dc), dec(jc), versus(dc, jc, lower))
	if own {
		p("CPU µs/msg, natsdelay process\t%s\t%s\t\t\t", lower, dec(perMsgUs(d.Service, dn)))
	}
	if srv {
		ds, js := perMsgUs(d.Server, dn), perMsgUs(j.Server, jn)
		p("CPU µs/msg, nats-server process\t%s\t%s\t%s\t%s\t", lower, dec(ds), dec(js), versus(ds, js, lower))
		if own {
			sv := perMsgUs(d.Service, dn) / ds
			p("natsdelay process / nats-server process\t%s\t%s\t\t\t", lower, dec(sv))
		}
	}
	if own {
		ds, js := perMsgUs(d.Service+d.Bench, dn), perMsgUs(j.Bench, jn)
		if srv {
			ds, js = perMsgUs(d.Service+d.Bench+d.Server, dn), perMsgUs(j.Bench+j.Server, jn)
		}
		p("CPU µs/msg, all processes\t%s\t%s\t%s\t%s\t", lower, dec(ds), dec(js), versus(ds, js, lower))
	}
}

// writeCPURows prints the CPU time per message of n messages: natsdelay's
// process when it has its own, and the bench process. format places the
// figure in the row's columns.
func writeCPURows(p func(string, ...any), prefix string, c CPU, n int, own bool, format string) {
	if own {
		p(prefix+"CPU µs/msg, natsdelay process"+format, dec(perMsgUs(c.Service, n)))
		p(prefix+"CPU µs/msg, bench process (nats-server, clients)"+format, dec(perMsgUs(c.Bench, n)))
		return
	}
	p(prefix+"CPU µs/msg, bench process (nats-server, clients, natsdelay)"+format, dec(perMsgUs(c.Bench, n)))
}

// writeWaves prints natsdelay's memory at idle and after every wave, with
// each wave's rate and CPU time per message.
func writeWaves(p func(string, ...any), wv *WavesResult) {
	who := "natsdelay process"
	if !wv.OwnProcess {
		who = "bench process (natsdelay in it)"
	}
	p("waves: %d of %s new subjects, one due-now msg each\t%s RSS MiB\tGo heap MiB\tdispatcher subjects\tmsgs/s\tnatsdelay CPU µs/msg\tbench CPU µs/msg\t",
		len(wv.Waves), num(float64(wv.Subjects)), who)
	row := func(label string, m MemSample, rate string, cpu CPU) {
		heap := "-"
		if m.HeapBytes >= 0 {
			heap = dec(mib(m.HeapBytes))
		}
		p("%s\t%s\t%s\t%s\t%s\t%s\t%s\t", label, dec(mib(m.RSSBytes)), heap, count(m.DispatchSubjects), rate,
			dec(perMsgUs(cpu.Service, wv.Subjects)), dec(perMsgUs(cpu.Bench, wv.Subjects)))
	}
	row("idle, before the first wave", wv.Idle, "", CPU{Service: -1, Bench: -1, Server: -1})
	for i, w := range wv.Waves {
		row(fmt.Sprintf("after wave %d, drained", i+1), w.Mem, num(w.Rate), w.CPU)
		if w.Released != nil {
			row(fmt.Sprintf("after wave %d, idle: memory handed back", i+1), *w.Released, "", CPU{Service: -1, Bench: -1, Server: -1})
		}
	}
	p("")
}

// writeFlow prints the flow phase: the unlimited subject's lateness alone
// and beside the paused and the rate-limited subjects, the ratio of their
// p99s, and the CPU time per measured message.
func writeFlow(p func(string, ...any), fr *FlowResult, own bool) {
	p("flow control: %s msgs at %s/s on an unlimited subject\tbetter\talone\tbeside a paused and a limited subject\tbeside vs alone\t", num(float64(fr.Msgs)), num(fr.Rate))
	a, b := fr.Alone, fr.Beside
	for _, q := range []struct {
		label  string
		av, bv float64
	}{{"p50 ms", a.P50Ms, b.P50Ms}, {"p99 ms", a.P99Ms, b.P99Ms}, {"max ms", a.MaxMs, b.MaxMs}} {
		p("  %s\t%s\t%s\t%s\t%s\t", q.label, lower, dec(q.av), dec(q.bv), versus(q.bv, q.av, lower))
	}
	p("  delivered\t%s\t%d\t%d\t\t", higher, a.Delivered, b.Delivered)
	cpu := func(label string, av, bv float64) {
		ap, bp := perMsgUs(av, a.Scheduled), perMsgUs(bv, b.Scheduled)
		p("  %s\t%s\t%s\t%s\t%s\t", label, lower, dec(ap), dec(bp), versus(bp, ap, lower))
	}
	if own {
		cpu("CPU µs/msg, natsdelay process", a.CPU.Service, b.CPU.Service)
	}
	cpu(cpuLabel(own, false), a.CPU.Bench, b.CPU.Bench)
	// No tab, so that this long line does not widen the first column.
	settled := fmt.Sprintf("idle %.0f s after writing them", fr.SettleS)
	if fr.SettleS < 0 {
		settled = "not idle within " + settleLimit.String() + " after writing them"
	}
	p("  beside: %s due on a paused subject (%s), %s due on a subject limited to %s/s (%d of them delivered meanwhile); p99 ratio %.2f",
		num(float64(fr.Paused)), settled, num(float64(fr.Rated)), num(fr.RatedRate), fr.RatedDelivered, fr.P99Ratio)
	p("\t")
}

// recurMethod says how each system's planned times are known; the table
// prints it under the recurring rows.
const recurMethod = "planned times: natsdelay's Delay-Occurrence header; JetStream's first is the schedule message's stored time\n" +
	"  rounded to the second plus the interval (the server's own rule), each later one the Nats-Schedule-Next header of\n" +
	"  the firing before it. Both systems start every schedule on a whole second, so each second all fall due together"

// writeRecurring prints the recurring run: lateness, missed and doubled
// occurrences of both systems, the ratio of their p99s, then natsdelay's
// cost per idle schedule.
func writeRecurring(p func(string, ...any), rr *RecurringResult) {
	var d, j *RecurLateness
	for i := range rr.Systems {
		switch rr.Systems[i].System {
		case SystemDelay:
			d = &rr.Systems[i]
		case SystemJS:
			j = &rr.Systems[i]
		}
	}
	if d != nil && j != nil {
		p("recurring: %s schedules every %s, one subject each, for %.0f s, every occurrence ACKed\tbetter\tnatsdelay\tjetstream\tnatsdelay vs jetstream\t",
			num(float64(rr.Schedules)), time.Duration(rr.EveryMs*float64(time.Millisecond)), rr.WindowS)
		p("planned times in the window\t\t%s\t%s\t\t", num(float64(d.Planned)), num(float64(j.Planned)))
		p("delivered\t%s\t%s\t%s\t%s\t", higher, num(float64(d.Delivered)), num(float64(j.Delivered)), versus(float64(d.Delivered), float64(j.Delivered), higher))
		p("missed (not delivered %s after the window)\t%s\t%s\t%s\t\t", time.Duration(rr.GraceMs*float64(time.Millisecond)), lower, num(float64(d.Missed)), num(float64(j.Missed)))
		p("doubled (two ids, or again after the ACK)\t%s\t%s\t%s\t\t", lower, num(float64(d.Doubled)), num(float64(j.Doubled)))
		p("early\t\t%d\t%d\t\t", d.Early, j.Early)
		if d.OffPlan+j.OffPlan > 0 {
			p("off the plan\t\t%d\t%d\t\t", d.OffPlan, j.OffPlan)
		}
		for _, row := range []struct {
			name string
			d, j float64
		}{{"lateness p50 ms", d.P50Ms, j.P50Ms}, {"lateness p99 ms", d.P99Ms, j.P99Ms}, {"lateness max ms", d.MaxMs, j.MaxMs}} {
			p("%s\t%s\t%s\t%s\t%s\t", row.name, lower, dec(row.d), dec(row.j), versus(row.d, row.j, lower))
		}
		p("lateness p99, jetstream's over natsdelay's\thigher\t%s\t\t\t", dec(rr.P99Ratio))
		if cpu := min(d.CPU.Bench, j.CPU.Bench); cpu < minCPUSeconds {
			p("CPU µs/occurrence, whole bench process\t\t%s\t\t\t", fewTicks(cpu))
		} else {
			dc, jc := perMsgUs(d.CPU.Bench, d.Delivered), perMsgUs(j.CPU.Bench, j.Delivered)
			p("CPU µs/occurrence, whole bench process\t%s\t%s\t%s\t%s\t", lower, dec(dc), dec(jc), versus(dc, jc, lower))
		}
		if d.LeadMissed {
			p("taking the schedules in ran past their start\t\t%v\t\t\t", d.LeadMissed)
		}
		p("%s\t", recurMethod)
		p("")
	}
	if rr.Idle != nil {
		writeRecurringIdle(p, rr.Idle)
	}
}

// writeMemParts prints where natsdelay's resident set lives, empty, right
// after the schedules and once idle, where it knows (see MemSample).
func writeMemParts(p func(string, ...any), before, after MemSample, idle *MemSample) {
	if before.RSSAnonBytes == 0 || after.RSSAnonBytes == 0 {
		return
	}
	parts := func(m MemSample) string {
		return fmt.Sprintf("%s/%s/%s/%s/%s", dec(mib(m.RSSFileBytes)), dec(mib(m.RSSAnonBytes)),
			dec(mib(m.GoHeldBytes)), dec(mib(m.HeapInuseBytes)), dec(mib(m.RSSAnonBytes-m.GoHeldBytes)))
	}
	idleParts := "-"
	if idle != nil {
		idleParts = parts(*idle)
	}
	p("RSS MiB: file/anonymous/Go holds/heap in use/outside Go; empty, with them, once idle\t%s\t%s\t%s\t", parts(before), parts(after), idleParts)
}

// writeRecurringIdle prints natsdelay's cost per idle schedule: memory,
// CPU to take them in and while idle, and a restart.
func writeRecurringIdle(p func(string, ...any), x *RecurIdleResult) {
	who := "natsdelay process"
	if !x.OwnProcess {
		who = "bench process (natsdelay in it)"
	}
	p("recurring idle: natsdelay with %s schedules %q, one subject each\twith 0\twith %s\t\t", num(float64(x.Schedules)), x.Spec, num(float64(x.Schedules)))
	p("%s RSS MiB\t%s\t%s\t\t", who, dec(mib(x.MemBefore.RSSBytes)), dec(mib(x.MemAfter.RSSBytes)))
	if x.MemBefore.HeapBytes >= 0 && x.MemAfter.HeapBytes >= 0 {
		p("natsdelay Go heap MiB, live after a GC\t%s\t%s\t\t", dec(mib(x.MemBefore.HeapBytes)), dec(mib(x.MemAfter.HeapBytes)))
	}
	per := float64(x.Schedules) / 100_000
	if x.Schedules < minGrowthItems {
		p("RSS growth per 100,000 schedules, MiB\t\t%s\t\t", tooFew(x.Schedules))
		if x.MemBefore.HeapBytes >= 0 && x.MemAfter.HeapBytes >= 0 {
			p("Go heap growth per 100,000 schedules, MiB\t\t%s\t\t", tooFew(x.Schedules))
		}
	} else {
		p("RSS growth per 100,000 schedules, MiB\t\t%s\t\t", dec(mib(x.MemAfter.RSSBytes-x.MemBefore.RSSBytes)/per))
		if x.MemBefore.HeapBytes >= 0 && x.MemAfter.HeapBytes >= 0 {
			p("Go heap growth per 100,000 schedules, MiB\t\t%s\t\t", dec(mib(x.MemAfter.HeapBytes-x.MemBefore.HeapBytes)/per))
		}
	}
	writeMemParts(p, x.MemBefore, x.MemAfter, x.MemIdle)
	if m := x.MemIdle; m != nil && x.Schedules >= minGrowthItems {
		p("once idle, memory handed back: RSS MiB, growth per 100,000 schedules\t\t%s, %s\t\t", dec(mib(m.RSSBytes)), dec(mib(m.RSSBytes-x.MemBefore.RSSBytes)/per))
		p("once idle: Go heap MiB, growth per 100,000 schedules\t\t%s, %s\t\t", dec(mib(m.HeapBytes)), dec(mib(m.HeapBytes-x.MemBefore.HeapBytes)/per))
	}
	p("schedules taken in per s\t\t%s\t\t", num(x.IngestRate))
	cpuS := x.IngestCPU.Service
	idle := x.IdleCPU.Service
	whoCPU := "natsdelay process"
	if !x.OwnProcess {
		cpuS, idle, whoCPU = x.IngestCPU.Bench, x.IdleCPU.Bench, "bench process"
	}
	if cpuS < minCPUSeconds {
		p("CPU s to take in 100,000 schedules, %s\t\t%s\t\t", whoCPU, fewTicks(cpuS))
	} else {
		p("CPU s to take in 100,000 schedules, %s\t\t%s\t\t", whoCPU, dec(cpuS/per))
	}
	if idle >= 0 && x.IdleS > 0 {
		p("CPU s per minute idle, %s (over %.0f s)\t\t%s\t\t", whoCPU, x.IdleS, dec(idle*60/x.IdleS))
	}
	p("restart until the API answers ms\t\t%s\t\t", dec(x.RestartMs))
	p("pending after the restart (INFO, answered in %s ms)\t\t%s\t\t", dec(x.InfoMs), num(float64(x.PendingAfterRestart)))
	p("")
}

// minGrowthItems is the fewest items (messages, subjects, schedules) of
// which the table gives the memory per item: the resident set moves by a
// MiB or so whatever the service holds, which over a few thousand items is
// hundreds of bytes each, over 50,000 twenty.
const minGrowthItems = 50_000

// tooFew is a per-item figure's place when the sample has n items, too few
// for one (see minGrowthItems).
func tooFew(n int) string {
	return fmt.Sprintf("- (%s too few to tell; docs/operations.md, section 4)", num(float64(n)))
}

// minCPUSeconds is the least CPU time the table divides into a per-item
// figure: /proc counts it in 10 ms ticks, so half a second is 50 of them.
const minCPUSeconds = 0.5

// fewTicks is a CPU figure's place when only s seconds were measured.
func fewTicks(s float64) string {
	return fmt.Sprintf("- (%.2f s of CPU in all: a few 10 ms ticks)", max(s, 0))
}

// growth is the bytes from before to after per one of n; NaN for no n.
func growth(before, after int64, n int) float64 {
	if n <= 0 {
		return math.NaN()
	}
	return float64(after-before) / float64(n)
}

// plural writes n things, with thousands separators.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return num(float64(n)) + " " + thing + "s"
}

// count writes a gauge, "-" where it is unknown (negative).
func count(v int64) string {
	if v < 0 {
		return "-"
	}
	return num(float64(v))
}

// trimLines writes to w what is written to it, line by line, without the
// spaces at the end of each line.
type trimLines struct {
	w   io.Writer
	buf []byte
}

func (t *trimLines) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := bytes.TrimRight(t.buf[:i], " ")
		// A full slice expression, so the append copies rather than
		// writing into buf.
		line = append(line[:len(line):len(line)], '\n')
		if _, err := t.w.Write(line); err != nil {
			return len(p), err
		}
		t.buf = t.buf[i+1:]
	}
}

// flush writes what is left after the last newline.
func (t *trimLines) flush() error {
	if len(t.buf) == 0 {
		return nil
	}
	_, err := t.w.Write(bytes.TrimRight(t.buf, " "))
	t.buf = nil
	return err
}

// jsDurability says when JetStream's reply to a schedule is durable: the
// ingest figures of the two systems compare like for like only when it
// fsyncs every write too.
func jsDurability(s *JetStreamSync) string {
	switch {
	case s == nil:
		return "jetstream fsyncs as the --nats server is configured, which the bench cannot see (nats-server's default is every 2m0s)"
	case s.Always:
		return "jetstream fsyncs every write before it replies (sync always, --js-sync-always)"
	}
	return fmt.Sprintf("jetstream replies once a write is handed to the OS, and fsyncs every %s "+
		"(nats-server's default sync interval; --js-sync-always syncs every write)", s.Interval)
}

// WriteJSON writes res to path, indented.
func WriteJSON(path string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return nil
}

func ingestRate(res *Results, system, mode string) float64 {
	for _, r := range res.Ingest {
		if r.System == system && r.Mode == mode {
			return r.Rate
		}
	}
	return math.NaN()
}

func fireFor(res *Results, system string, rate float64) *FireResult {
	for i := range res.Fire {
		if f := &res.Fire[i]; f.System == system && f.OfferedRate == rate {
			return f
		}
	}
	return nil
}

func ingestCPU(res *Results, system, mode string) float64 {
	for _, r := range res.Ingest {
		if r.System == system && r.Mode == mode {
			return perMsgUs(r.CPU.Bench, r.Msgs)
		}
	}
	return math.NaN()
}

// ingestRun is the ingest run of system in mode, or one with no figures.
func ingestRun(res *Results, system, mode string) IngestResult {
	for _, r := range res.Ingest {
		if r.System == system && r.Mode == mode {
			return r
		}
	}
	return IngestResult{Rate: math.NaN(), CPU: CPU{Service: -1, Bench: -1, Server: -1}}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// num writes a rate or count with thousands separators.
func num(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decs is dec of each of vs, space-separated.
func decs(vs []float64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = dec(v)
	}
	return strings.Join(s, " ")
}

func dec(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Which way a figure is better, as the better column says.
const (
	higher = "higher"
	lower  = "lower"
)

// versus compares natsdelay's figure d with another system's o, where
// better (higher or lower) says which way is better: "2.67x better" when d
// is 2.67 times o and higher is better, "3.45x worse" when o is 3.45 times
// d, and "same" when they are within rounding. It is "-" where either is
// missing or not above zero, so has no ratio.
func versus(d, o float64, better string) string {
	if math.IsNaN(d) || math.IsNaN(o) || d <= 0 || o <= 0 {
		return "-"
	}
	r := d / o
	if better == lower {
		r = o / d
	}
	f := dec(math.Max(r, 1/r))
	switch {
	case f == "1.00":
		return "same"
	case r > 1:
		return f + "x better"
	}
	return f + "x worse"
}

// ingestLabel names an ingest mode's row.
func ingestLabel(c ConfigSummary, mode string) string {
	if mode == "requesters" {
		return fmt.Sprintf("%d sync requesters", c.Requesters)
	}
	return fmt.Sprintf("pipelined, %d outstanding", c.Outstanding)
}

// writeCluster writes the cluster phase: one node beside three and
// beside JetStream R3, then the failovers.
func writeCluster(p func(string, ...any), c ConfigSummary, cr *ClusterResult) {
	one, three := SystemDelay+" x1", SystemDelay+" x3"
	find := func(rows []IngestResult, system, mode string) IngestResult {
		for _, r := range rows {
			if r.System == system && r.Mode == mode {
				return r
			}
		}
		return IngestResult{Rate: math.NaN(), CPU: CPU{Service: -1, Bench: -1, Server: -1}}
	}
	fire := func(system string) FireResult {
		for _, f := range cr.Fire {
			if f.System == system {
				return f
			}
		}
		return FireResult{P50Ms: math.NaN(), P99Ms: math.NaN(), MaxMs: math.NaN()}
	}
	p("cluster: %s\t\t\t\t\t\t\t", cr.Machines)
	p("cluster: %d msgs\tbetter\tnatsdelay 1 node\tnatsdelay 3 nodes\t3 nodes vs 1\tjetstream R3\t3 nodes vs R3\t", c.IngestMsgs)
	for _, mode := range []string{"pipelined", "requesters"} {
		a, b, j := find(cr.Ingest, one, mode), find(cr.Ingest, three, mode), find(cr.Ingest, SystemJSR3, mode)
		p("ingest %s msgs/s\t%s\t%s\t%s\t%s\t%s\t%s\t", ingestLabel(c, mode), higher, num(a.Rate), num(b.Rate), versus(b.Rate, a.Rate, higher), num(j.Rate), versus(b.Rate, j.Rate, higher))
		ac, bc := perMsgUs(a.CPU.Service, a.Msgs), perMsgUs(b.CPU.Service, b.Msgs)
		p("%s: CPU µs/msg, natsdelay processes\t%s\t%s\t%s\t%s\t\t\t", ingestLabel(c, mode), lower, dec(ac), dec(bc), versus(bc, ac, lower))
	}
	f1, f3, fj := fire(one), fire(three), fire(SystemJSR3)
	p("fire: %d msgs offered at %s/s\t\t\t\t\t\t\t", c.FireMsgs, num(f1.OfferedRate))
	for _, row := range []struct {
		name    string
		a, b, j float64
	}{
		{"lateness p50 ms", f1.P50Ms, f3.P50Ms, fj.P50Ms}, {"lateness p99 ms", f1.P99Ms, f3.P99Ms, fj.P99Ms}, {"lateness max ms", f1.MaxMs, f3.MaxMs, fj.MaxMs},
	} {
		p("%s\t%s\t%s\t%s\t%s\t%s\t%s\t", row.name, lower, dec(row.a), dec(row.b), versus(row.b, row.a, lower), dec(row.j), versus(row.b, row.j, lower))
	}
	p("early\t\t%d\t%d\t\t%d\t\t", f1.Early, f3.Early, fj.Early)
	p("delivered\t\t%d\t%d\t\t%d\t\t", f1.Delivered, f3.Delivered, fj.Delivered)
	if t1, ok := cr.ThrottledPct[one]; ok {
		p("quota periods throttled %%\t\t%s\t%s\t\t\t\t", dec(t1), dec(cr.ThrottledPct[three]))
	}
	if len(cr.Failovers) > 0 {
		p("failover (natsdelay: SIGKILL of the leader, --cluster-timeout %s)\t\tto first ack ms\tto first delivery ms\t\t\t\t", cr.ClusterTimeout)
		for i, f := range cr.Failovers {
			p("natsdelay kill %d\t\t%s\t%s\t\t\t\t", i+1, dec(f.ToAckMs), dec(f.ToDeliveryMs))
		}
		for i, f := range cr.JSFailovers {
			p("jetstream R3: shutdown of the stream leader's server %d\t\t%s\t%s\t\t\t\t", i+1, dec(f.ToAckMs), dec(f.ToDeliveryMs))
		}
	}
	p("")
}

// writeCells writes the cells phase: one cell beside the fleet and the
// hand-partitioned ideal, with the ratios between them.
func writeCells(p func(string, ...any), c ConfigSummary, cr *CellsResult) {
	find := func(system, mode string) IngestResult {
		for _, r := range cr.Ingest {
			if r.System == system && r.Mode == mode {
				return r
			}
		}
		return IngestResult{Rate: math.NaN(), CPU: CPU{Service: -1}}
	}
	n := cr.Cells
	p("cells: %d-node cells, %s; %d msgs over %d subjects\t\t\t\t\t\t\t\t\t", cr.CellNodes, cr.Machines, c.IngestMsgs, cr.Subjects)
	p("ingest msgs/s\tbetter\tone cell\t%d cells\t%d cells vs 1\tideal x%d\tideal vs 1\t%d cells vs ideal\t", n, n, n, n)
	var modes []string
	for _, r := range cr.Ingest {
		if r.System == CellsOne {
			modes = append(modes, r.Mode)
		}
	}
	for _, mode := range modes {
		a, f, i := find(CellsOne, mode), find(CellsFleet, mode), find(CellsIdeal, mode)
		p("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", mode, higher, num(a.Rate), num(f.Rate), times(f.Rate, a.Rate), num(i.Rate), times(i.Rate, a.Rate), times(f.Rate, i.Rate))
		ac, fc, ic := perMsgUs(a.CPU.Service, a.Msgs), perMsgUs(f.CPU.Service, f.Msgs), perMsgUs(i.CPU.Service, i.Msgs)
		p("%s: CPU µs/msg, natsdelay processes\t%s\t%s\t%s\t\t%s\t\t\t", mode, lower, dec(ac), dec(fc), dec(ic))
	}
	writeCellsEndToEnd(p, cr)
	if t1, ok := cr.ThrottledPct[CellsOne]; ok {
		p("quota periods throttled %%\t\t%s\t%s\t\t%s\t\t\t", dec(t1), throttledOf(cr.ThrottledPct, CellsFleet), dec(cr.ThrottledPct[CellsIdeal]))
	}
	if len(cr.FleetCells) > 0 {
		var cells []string
		for _, fc := range cr.FleetCells {
			cells = append(cells, fmt.Sprintf("%s: %d partitions, %d pending", fc.Cell, fc.Partitions, fc.Pending))
		}
		p("%d cells after their runs: %s\t\t\t\t\t\t\t\t", n, strings.Join(cells, "; "))
	}
	if !cr.Fleet {
		p("%d cells: not measured: this natsdelay has no serve --cell; the fleet's rows need a build with --cell\t\t\t\t\t\t\t\t", n)
	}
	p("")
}

// writeCellsEndToEnd writes the cells phase's end-to-end row and its CPU
// per message, where it ran.
func writeCellsEndToEnd(p func(string, ...any), cr *CellsResult) {
	if len(cr.EndToEnd) == 0 {
		return
	}
	find := func(system string) EndToEndResult {
		for _, r := range cr.EndToEnd {
			if r.System == system {
				return r
			}
		}
		return EndToEndResult{Rate: math.NaN(), CPU: CPU{Service: -1}}
	}
	a, f, i := find(CellsOne), find(CellsFleet), find(CellsIdeal)
	p("end to end (schedule, deliver, ACK)\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", higher, num(a.Rate), num(f.Rate), times(f.Rate, a.Rate), num(i.Rate), times(i.Rate, a.Rate), times(f.Rate, i.Rate))
	ac, fc, ic := perMsgUs(a.CPU.Service, a.Delivered), perMsgUs(f.CPU.Service, f.Delivered), perMsgUs(i.CPU.Service, i.Delivered)
	p("end to end: CPU µs/msg, natsdelay processes\t%s\t%s\t%s\t\t%s\t\t\t", lower, dec(ac), dec(fc), dec(ic))
}

// times is a/b as "N.NNx", or "-" where either is unknown.
func times(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// throttledOf is the throttled share of system, or "-" where it did not run.
func throttledOf(pct map[string]float64, system string) string {
	if v, ok := pct[system]; ok {
		return dec(v)
	}
	return "-"
}
