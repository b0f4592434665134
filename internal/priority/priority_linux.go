package priority

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ioprio_set(2) and ioprio_get(2) encoding.
const (
	ioprioWhoProcess = 1 // IOPRIO_WHO_PROCESS: a thread ID
	ioprioClassShift = 13
	ioprioLevelMask  = 1<<ioprioClassShift - 1
	lowestLevel      = 7
)

// Lower sets SCHED_IDLE (or nice 19 where that is refused) and best-effort
// I/O level 7 on every thread of the process. In a process Reexec started,
// every thread is lowered already and Lower confirms it; elsewhere it is
// the fallback, and cannot be exact:
//
// A thread started while Lower runs inherits its creator's settings at that
// moment: from a thread not yet lowered, or lowered half (CPU but not yet
// I/O). Lower therefore lists the threads again after each pass and stops
// only when a listing holds no thread it has not lowered. That still misses
// a thread whose creator had begun to clone it before being lowered: it
// copies the old priority but reaches /proc/self/task only after the final
// listing. Ten processes creating threads throughout Lower left such a
// thread in about one try in 400.
func Lower() (Applied, error) {
	a := Applied{CPU: "SCHED_IDLE", IOClass: ClassBestEffort, IOLevel: lowestLevel}
	done := make(map[int]bool)
	for {
		tids, err := threads("self")
		if err != nil {
			return a, err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			done[tid] = true
			fresh++
			if err := lowerThread(tid, &a); err != nil {
				return a, err
			}
		}
		if fresh == 0 {
			return a, nil
		}
	}
}

// Reexec lowers the calling thread (SCHED_IDLE or nice 19, best-effort I/O
// level 7) and replaces the program with a fresh run of itself on that
// thread: /proc/self/exe with the same arguments and the same environment
// plus MarkerEnv. The new program starts with one thread, lowered, and
// every thread its runtime starts inherits the priority; it should call
// Reexecuted before anything else that could lead here again.
//
// Reexec returns only when it could not re-execute (no /proc, a seccomp
// filter, execve refused) or when MarkerEnv says this process is already
// the re-executed one (a loop). The calling thread may then be lowered and
// the others not: the caller should fall back to Lower.
//
// Everything else the process holds ends: goroutines, open files (Go opens
// them close-on-exec; standard input, output and error stay), signal
// handlers. The process ID stays, so systemd (MAINPID, WATCHDOG_PID) and a
// parent waiting on it see the same process. Call it before starting
// anything that should not restart.
func Reexec() error {
	if os.Getenv(MarkerEnv) == strconv.Itoa(os.Getpid()) {
		return errors.New("this process is already re-executed at low priority (" + MarkerEnv + " is set for it)")
	}
	// The thread that is lowered must be the one that calls execve.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread() // reached only when execve failed
	tid := unix.Gettid()
	if _, err := lowerCPU(tid); err != nil {
		return fmt.Errorf("lower the CPU priority of thread %d: %w", tid, err)
	}
	if err := setIOPrio(tid, ClassBestEffort, lowestLevel); err != nil {
		return fmt.Errorf("lower the I/O priority of thread %d: %w", tid, err)
	}
	env := append(withoutMarker(os.Environ()), MarkerEnv+"="+strconv.Itoa(os.Getpid()))
	err := unix.Exec("/proc/self/exe", os.Args, env)
	return fmt.Errorf("re-execute /proc/self/exe: %w", err)
}

// lowerThread lowers one thread's CPU and I/O priority; a thread that has
// exited meanwhile is skipped.
func lowerThread(tid int, a *Applied) error {
	cpu, err := lowerCPU(tid)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lower the CPU priority of thread %d: %w", tid, err)
	}
	if cpu != "SCHED_IDLE" {
		a.CPU = cpu
	}
	if err := setIOPrio(tid, ClassBestEffort, lowestLevel); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("lower the I/O priority of thread %d: %w", tid, err)
	}
	a.Threads++
	return nil
}

// lowerCPU moves thread tid to SCHED_IDLE, or to nice 19 if the kernel
// refuses (a seccomp filter, a kernel without it).
func lowerCPU(tid int) (string, error) {
	err := unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0)
	if err == nil {
		return "SCHED_IDLE", nil
	}
	if errors.Is(err, unix.ESRCH) {
		return "", err
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 19); err != nil {
		return "", err
	}
	return "nice 19", nil
}

func setIOPrio(tid int, class Class, level int) error {
	prio := int(class)<<ioprioClassShift | level
	_, _, errno := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), uintptr(prio))
	if errno != 0 {
		return errno
	}
	return nil
}

func getIOPrio(tid int) (Class, int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if errno != 0 {
		return 0, 0, errno
	}
	return Class(int(r) >> ioprioClassShift), int(r) & ioprioLevelMask, nil
}

// threads lists the IDs of the threads of process pid ("self" for this one).
func threads(pid string) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// Threads reads back the priority of every thread of process pid (0: this
// one).
func Threads(pid int) ([]Thread, error) {
	p := "self"
	if pid > 0 {
		p = strconv.Itoa(pid)
	}
	tids, err := threads(p)
	if err != nil {
		return nil, err
	}
	var out []Thread
	for _, tid := range tids {
		t, err := readThread(p, tid)
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// readThread reads policy and nice from /proc/PID/task/TID/stat (fields
// 41 and 19; the command name, field 2, may hold spaces, so fields are
// counted after its closing parenthesis) and the I/O priority.
func readThread(pid string, tid int) (Thread, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%s/task/%d/stat", pid, tid))
	if err != nil {
		return Thread{}, err
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3
	if len(f) < 39 {
		return Thread{}, fmt.Errorf("thread %d: short stat line", tid)
	}
	t := Thread{TID: tid}
	if t.Nice, err = strconv.Atoi(f[19-3]); err != nil {
		return Thread{}, fmt.Errorf("thread %d: nice: %w", tid, err)
	}
	if t.Policy, err = strconv.Atoi(f[41-3]); err != nil {
		return Thread{}, fmt.Errorf("thread %d: policy: %w", tid, err)
	}
	t.IOClass, t.IOLevel, err = getIOPrio(tid)
	return t, err
}
