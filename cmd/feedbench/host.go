package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of CPU times in /proc: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// databaseServers are process names whose CPU time counts as the database's,
// not as other load: the benchmark's own server is among them (tidbtest is
// the in-process TiDB of make bench-tidb; redis-server is the store of the
// Redis anchor, idle but in phases O and W).
var databaseServers = map[string]bool{"mariadbd": true, "mysqld": true, "tidbtest": true, "redis-server": true}

// hostSampler measures, from /proc, the CPU that processes other than this
// benchmark and the database servers use: other people's builds and tests
// on a shared machine, which take cores from both sides of the benchmark.
type hostSampler struct {
	self    string
	prev    map[string]int64 // pid → utime+stime ticks at the last sample
	at      time.Time
	samples []float64 // cores used by other processes, per interval
}

func newHostSampler() *hostSampler {
	h := &hostSampler{self: strconv.Itoa(os.Getpid())}
	h.prev, _ = h.read()
	h.at = time.Now()
	return h
}

// sample records the cores other processes used since the last sample.
func (h *hostSampler) sample() {
	cur, ok := h.read()
	now := time.Now()
	if !ok || h.prev == nil {
		return
	}
	var ticks int64
	for pid, t := range cur {
		// A process new since the last sample counts from its start.
		ticks += t - h.prev[pid]
	}
	el := now.Sub(h.at).Seconds()
	if el < 0.5 {
		return // too short to mean anything; keep accumulating
	}
	h.samples = append(h.samples, float64(ticks)/clockTicks/el)
	h.prev, h.at = cur, now
}

// read returns the CPU ticks of every process but this one and the
// database servers; ok is false where /proc is missing.
func (h *hostSampler) read() (map[string]int64, bool) {
	out := map[string]int64{}
	ok := eachProcess(func(pid, comm string, ticks int64) {
		if _, ours := children.Load(pid); pid != h.self && !ours && !databaseServers[comm] {
			out[pid] = ticks
		}
	})
	return out, ok
}

// eachProcess calls fn with every process's pid, command name and CPU ticks
// (user + system) so far; false where /proc is missing.
func eachProcess(fn func(pid, comm string, ticks int64)) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		if comm, ticks, ok := parseStat(string(b)); ok {
			fn(pid, comm, ticks)
		}
	}
	return true
}

// parseStat reads a process's command name and CPU ticks (user + system)
// from the text of its /proc/<pid>/stat.
func parseStat(s string) (comm string, ticks int64, ok bool) {
	// pid (comm) state ppid … : comm may hold spaces, so cut at the last ')'.
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, false
	}
	f := strings.Fields(s[closing+1:])
	// Fields after comm start at state (field 3); utime and stime are 14 and 15.
	if len(f) < 13 {
		return "", 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, false
	}
	return s[open+1 : closing], ut + st, true
}

// pidCPU is the CPU seconds (user + system) process pid has used so
// far, and its command name.
func pidCPU(pid int) (seconds float64, comm string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	comm, ticks, ok := parseStat(string(b))
	if !ok {
		return 0, "", fmt.Errorf("process %d: unreadable /proc stat", pid)
	}
	return float64(ticks) / clockTicks, comm, nil
}

// cpuTimes is CPU time used so far, in seconds, by this process and by the
// database servers on this machine (all of them: a remote server is not
// seen, and DB is then 0).
type cpuTimes struct{ Self, DB float64 }

// addSpan adds the CPU used between the samples from and to.
func (c *cpuTimes) addSpan(from, to cpuTimes) {
	c.Self += to.Self - from.Self
	c.DB += to.DB - from.DB
}

func readCPUTimes() cpuTimes {
	var c cpuTimes
	self := strconv.Itoa(os.Getpid())
	eachProcess(func(pid, comm string, ticks int64) {
		switch {
		case pid == self:
			c.Self += float64(ticks) / clockTicks
		case databaseServers[comm]:
			c.DB += float64(ticks) / clockTicks
		}
	})
	return c
}

// mean and max of the samples, in cores.
func (h *hostSampler) summary() (mean, peak float64, n int) {
	for _, s := range h.samples {
		mean += s
		peak = max(peak, s)
	}
	if n = len(h.samples); n > 0 {
		mean /= float64(n)
	}
	return mean, peak, n
}

// pageCost is what a read run's pages cost the machine: CPU of the
// database server and of this process (readers, service), and the reads
// the server's engines made from disk, over every page the run read,
// its warm-up included.
type pageCost struct {
	CPU       cpuTimes
	Reads     int64
	Pages     int
	HaveReads bool
}

// costSample is a point the cost of a run is measured between.
type costSample struct {
	cpu   cpuTimes
	reads int64
	ok    bool
}

// costNow samples the CPU times and the server's disk reads.
func (b *bench) costNow(ctx context.Context) costSample {
	reads, ok := engineDiskReads(ctx, b.db)
	return costSample{cpu: readCPUTimes(), reads: reads, ok: ok}
}

// add counts what pages cost between from and to.
func (c *pageCost) add(from, to costSample, pages int) {
	c.CPU.addSpan(from.cpu, to.cpu)
	c.Pages += pages
	if from.ok && to.ok {
		c.Reads += to.reads - from.reads
		c.HaveReads = true
	}
}

// ServerCPU is the database server's CPU per page, in µs (0: not seen).
func (c pageCost) ServerCPU() float64 { return c.per(c.CPU.DB * 1e6) }

// SelfCPU is this process's CPU per page, in µs.
func (c pageCost) SelfCPU() float64 { return c.per(c.CPU.Self * 1e6) }

// DiskReads is the engines' reads from disk per page.
func (c pageCost) DiskReads() float64 { return c.per(float64(c.Reads)) }

// CPUBound is the pages a second this machine's cores allow at the CPU a
// page costs the server and this process together.
func (c pageCost) CPUBound() float64 {
	per := c.ServerCPU() + c.SelfCPU()
	if per == 0 {
		return 0
	}
	return float64(runtime.NumCPU()) * 1e6 / per
}

// columns renders the cost as three table cells; "—" where not seen.
func (c pageCost) columns() string {
	cells := []string{"—", fmt.Sprintf("%.0f", c.SelfCPU()), "—"}
	if c.CPU.DB > 0 {
		cells[0] = fmt.Sprintf("%.0f", c.ServerCPU())
	}
	if c.HaveReads {
		cells[2] = fmt.Sprintf("%.2f", c.DiskReads())
	}
	return strings.Join(cells, " | ")
}

func (c pageCost) per(v float64) float64 {
	if c.Pages == 0 {
		return 0
	}
	return v / float64(c.Pages)
}
