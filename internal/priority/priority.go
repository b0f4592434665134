// Package priority lowers the CPU and I/O priority of the whole process,
// every thread of it, so that a background agent yields to the training
// job it runs beside: the data loaders, tokenisation and host side of the
// training step are CPU-bound, and the next checkpoint's write competes
// with the upload for the disk.
//
// CPU: SCHED_IDLE, the lowest policy Linux has, which still runs whenever
// the trainer leaves a core idle; where it is refused, nice 19. I/O: the
// best-effort class at its lowest level (7), not the idle class, which a
// busy disk can starve for ever.
//
// Linux keeps both per thread: a new thread starts with its creator's, and
// execve(2) keeps the calling thread's. A running Go process has several
// threads and its runtime starts more at any moment, so changing them one
// by one (Lower) races with thread creation: a thread cloned by one not yet
// lowered copies the old priority but appears in /proc/self/task only
// after the last listing. Reexec avoids the race by construction: it lowers
// the calling thread alone and re-executes the program on it. After execve
// the process has that one thread, lowered, and every thread the new Go
// runtime starts descends from it. The re-executed process recognises
// itself with Reexecuted and still calls Lower, which finds every thread
// lowered already and reports what is in force; Lower alone remains the
// fallback where the program cannot be re-executed.
package priority

import (
	"os"
	"strconv"
	"strings"
)

// Class is an I/O scheduling class (ioprio_set(2)).
type Class int

// I/O scheduling classes.
const (
	ClassNone       Class = 0
	ClassRealtime   Class = 1
	ClassBestEffort Class = 2
	ClassIdle       Class = 3
)

// Applied says what Lower set.
type Applied struct {
	// CPU is "SCHED_IDLE" or "nice 19".
	CPU string
	// IOClass and IOLevel are the I/O priority set (best-effort, 7).
	IOClass Class
	IOLevel int
	// Threads is how many threads Lower set (in a re-executed process,
	// found already lowered and set again).
	Threads int
}

// Thread is one thread's priority as the kernel reports it.
type Thread struct {
	TID int
	// Policy is the scheduling policy (0 SCHED_OTHER, 5 SCHED_IDLE), from
	// /proc/self/task/TID/stat.
	Policy int
	// Nice is the thread's nice value, from the same file.
	Nice int
	// IOClass and IOLevel come from ioprio_get(2).
	IOClass Class
	IOLevel int
}

// MarkerEnv is the environment variable Reexec adds for the program it
// re-executes. Its value is the process ID, which execve keeps: a copy
// inherited by another process (a program the re-executed one starts, a
// shell that exported it) names a different process and is ignored.
const MarkerEnv = "FERRY_PRIORITY_LOWERED"

// Reexecuted says whether Reexec started this process, and removes
// MarkerEnv from the environment in any case, so that no program this
// process starts inherits it. Call it once, early, before Reexec: a second
// call finds the variable gone and returns false.
func Reexecuted() bool {
	v, ok := os.LookupEnv(MarkerEnv)
	if !ok {
		return false
	}
	_ = os.Unsetenv(MarkerEnv)
	return v == strconv.Itoa(os.Getpid())
}

// withoutMarker is env less any MarkerEnv entry.
func withoutMarker(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, MarkerEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}
