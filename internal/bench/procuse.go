package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procUse is what a process has used so far: CPU seconds over all its
// threads and the bytes it made the storage read and write.
type procUse struct {
	cpuS                  float64
	readBytes, writeBytes int64
}

// readProcUse reads pid's use from /proc (CPU through procCPU); what it
// cannot read, a process that has exited included, reads as zero.
func readProcUse(pid int) procUse {
	u := procUse{cpuS: procCPU(pid)}
	if io, err := os.Open(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		defer io.Close()
		sc := bufio.NewScanner(io)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ": ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "read_bytes":
				u.readBytes = n
			case "write_bytes":
				u.writeBytes = n
			}
		}
	}
	return u
}

// cpuTimes sums /proc/stat's counters over some CPUs, in clock ticks.
type cpuTimes struct{ total, steal float64 }

// trainerCPUCount is how many CPUs a "0-K" list names (K+1); 1 for a
// single CPU.
func trainerCPUCount(cpus string) int {
	_, last, ok := strings.Cut(cpus, "-")
	if !ok {
		return 1
	}
	k, err := strconv.Atoi(last)
	if err != nil {
		return 1
	}
	return k + 1
}

// readCPUTimes sums the counters of cpu0 to cpu(n-1); zero if /proc/stat
// cannot be read.
func readCPUTimes(n int) cpuTimes {
	var t cpuTimes
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	for _, line := range strings.Split(string(stat), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		if id, err := strconv.Atoi(f[0][3:]); err != nil || id >= n {
			continue
		}
		// user nice system idle iowait irq softirq steal [guest...]: the
		// guest times are already inside user and nice.
		for j := 1; j <= 8; j++ {
			v, _ := strconv.ParseFloat(f[j], 64)
			t.total += v
			if j == 8 {
				t.steal += v
			}
		}
	}
	return t
}

// stealPctSince is the steal share, in percent, of the time since then.
func (t cpuTimes) stealPctSince(then cpuTimes) float64 {
	d := t.total - then.total
	if d <= 0 {
		return 0
	}
	return 100 * (t.steal - then.steal) / d
}
