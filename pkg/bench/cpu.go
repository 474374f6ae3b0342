package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's utime and stime: 100
// on every Linux architecture Go supports.
const clockTicks = 100

// ProcessCPU returns the user plus system CPU time a process has used so far,
// from /proc/PID/stat (all its threads).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
	}
	return parseProcStat(b)
}

// parseProcStat extracts utime+stime (fields 14 and 15) from a
// /proc/PID/stat line; the command name (field 2) may contain spaces and
// parentheses, so fields are counted after its last ')'.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: malformed /proc/PID/stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: malformed /proc/PID/stat: %d fields", len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("bench: malformed /proc/PID/stat time %q", s)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// selfCPU is this process's user plus system CPU time.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuWindow holds CPU times sampled at the measured window's edges.
type cpuWindow struct {
	begun, ended    bool
	daemons0, self0 time.Duration
	daemons, self   time.Duration // deltas
	daemonsMeasured bool
}

func sumCPU(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		d, err := ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

func (w *cpuWindow) begin(pids []int) error {
	w.begun, w.self0 = true, selfCPU()
	var err error
	w.daemons0, err = sumCPU(pids)
	return err
}

func (w *cpuWindow) end(pids []int) error {
	if !w.begun || w.ended {
		return nil
	}
	w.ended, w.self = true, selfCPU()-w.self0
	d, err := sumCPU(pids)
	if err != nil {
		return err
	}
	w.daemons, w.daemonsMeasured = d-w.daemons0, len(pids) > 0
	return nil
}
