package bench

import (
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat. Linux
// reports them in USER_HZ, which is 100 on every architecture whatever
// the kernel's own tick rate; a figure is therefore good to 10 ms.
const userHZ = 100

// procCPU is the user plus system CPU time of process pid ("self" for
// this one) from /proc/<pid>/stat; ok is false where there is none.
func procCPU(pid string) (cpu time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime, fields 14 and 15, of a
// /proc/<pid>/stat line. The command name in field 2 is in parentheses
// and may hold spaces and parentheses itself, so the fields are counted
// from the last ')'.
func parseStatCPU(stat string) (time.Duration, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	// After ')': state (3), ppid (4), ..., utime (14), stime (15).
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, true
}

// CPU is the CPU time, user plus system, that processes spent over a run,
// in seconds; -1 where it is unknown or there is no such process.
type CPU struct {
	// Service is natsdelay's own process, in the runs that start it as a
	// child; -1 where natsdelay runs inside the bench process.
	Service float64 `json:"natsdelay_process_s"`
	// Bench is the bench process: the embedded nats-server (none with
	// --nats) and the clients, and natsdelay where it runs inside.
	Bench float64 `json:"bench_process_s"`
	// Server is the nats-server process at Config.NATSURL, where
	// Config.ServerPID names it; -1 otherwise (an embedded server is in
	// Bench).
	Server float64 `json:"nats_server_process_s"`
}

// cpuMark is the CPU time of the bench process and of natsdelay's
// process at the start of a run.
type cpuMark struct {
	pid         int // natsdelay's process, or 0
	srvPID      int // the nats-server's process, or 0
	svc, self   time.Duration
	srv         time.Duration
	okSvc, okMe bool
	okSrv       bool
}

// markCPU reads the CPU times now; pid is natsdelay's process, 0 when it
// runs inside this one.
func (e *env) markCPU(pid int) cpuMark {
	m := cpuMark{pid: pid, srvPID: e.cfg.ServerPID}
	m.self, m.okMe = procCPU("self")
	if pid > 0 {
		m.svc, m.okSvc = procCPU(strconv.Itoa(pid))
	}
	if m.srvPID > 0 {
		m.srv, m.okSrv = procCPU(strconv.Itoa(m.srvPID))
	}
	return m
}

// since is the CPU time spent since m.
func (m cpuMark) since() CPU {
	c := CPU{Service: -1, Bench: -1, Server: -1}
	if now, ok := procCPU("self"); ok && m.okMe {
		c.Bench = (now - m.self).Seconds()
	}
	if m.pid > 0 && m.okSvc {
		if now, ok := procCPU(strconv.Itoa(m.pid)); ok {
			c.Service = (now - m.svc).Seconds()
		}
	}
	if m.srvPID > 0 && m.okSrv {
		if now, ok := procCPU(strconv.Itoa(m.srvPID)); ok {
			c.Server = (now - m.srv).Seconds()
		}
	}
	return c
}

// perMsgUs is CPU seconds per message of n, in microseconds; NaN where
// the CPU time is unknown or there are no messages.
func perMsgUs(s float64, n int) float64 {
	if s < 0 || n <= 0 {
		return math.NaN()
	}
	return s * 1e6 / float64(n)
}
