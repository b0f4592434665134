package main

import (
	"bufio"
	"bytes"
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

// userHZ is the unit of /proc/PID/stat's times: USER_HZ, 100 on Linux's
// user ABI whatever the kernel's tick.
const userHZ = 100

// readProcUse reads pid's use from /proc; what it cannot read stays zero
// (the caller subtracts two readings, so a process that exited reads as
// having used nothing more).
func readProcUse(pid int) procUse {
	var u procUse
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// The command name may hold spaces; the fields after it do not.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
			f := strings.Fields(string(stat[i+1:]))
			if len(f) > 12 { // utime and stime are fields 14 and 15
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				u.cpuS = (ut + st) / userHZ
			}
		}
	}
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
