//go:build linux

package priority

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This test comes first in the file: tests run in source order, and the
// ones below lower this process for good.
//
// Reexec leaves no thread at normal priority, even while the runtime keeps
// starting threads (as the agent's does at any moment). Each try runs in a
// fresh child process, the test binary again, which calls Reexec. The
// re-executed child reads back its threads before anything in it lowers
// one, which shows that execve kept the calling thread's CPU and I/O
// priority; then goroutines keep creating OS threads while it calls Lower,
// as the agent does, and every thread is read back during and after. With
// Lower alone, in place, this test failed about one run in 40 (a thread
// cloned during the last listing kept normal priority).
func TestLowerWhileThreadsStart(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		reexecChild(t)
		return
	}
	if lowered(t) {
		t.Skip("this process was lowered by an earlier test, and its children would inherit that")
	}
	for i := range 10 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLowerWhileThreadsStart$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("try %d: %v\n%s", i, err, out)
		}
		if !bytes.Contains(out, []byte(childDone)) {
			t.Fatalf("try %d: the child did not report a re-executed run:\n%s", i, out)
		}
	}
}

const (
	// childEnv makes the test binary the child of TestLowerWhileThreadsStart.
	childEnv = "FERRY_PRIORITY_CHILD"
	// childDone starts the line the re-executed child prints when it passes.
	childDone = "re-executed child checked"
)

// lowered says whether any thread of this process already runs at
// best-effort I/O level 7.
func lowered(t *testing.T) bool {
	ts, err := Threads(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range ts {
		if th.IOClass == ClassBestEffort && th.IOLevel == 7 {
			return true
		}
	}
	return false
}

// checkLowered fails t for each thread of this process not at the low
// priority: SCHED_IDLE, or nice 19 when cpu is "nice 19" or not yet known
// (""), and best-effort I/O level 7. It returns how many threads it read.
func checkLowered(t *testing.T, when, cpu string) int {
	t.Helper()
	ts, err := Threads(0)
	if err != nil {
		t.Fatal(err)
	}
	const schedIdle = 5
	for _, th := range ts {
		cpuOK := th.Policy == schedIdle || (cpu != "SCHED_IDLE" && th.Nice == 19)
		if !cpuOK || th.IOClass != ClassBestEffort || th.IOLevel != 7 {
			t.Errorf("%s: thread %d: policy %d, nice %d, I/O class %d level %d; want SCHED_IDLE (or nice 19) and best-effort 7", when, th.TID, th.Policy, th.Nice, th.IOClass, th.IOLevel)
		}
	}
	return len(ts)
}

func reexecChild(t *testing.T) {
	if !Reexecuted() {
		if lowered(t) {
			t.Fatal("the child process started lowered: it would show nothing")
		}
		err := Reexec()
		t.Fatalf("Reexec returned: %v", err)
	}
	if v, ok := os.LookupEnv(MarkerEnv); ok {
		t.Errorf("%s=%s is still set after Reexecuted", MarkerEnv, v)
	}
	// Nothing in this process has lowered a thread yet: what is low here
	// came through execve, and through thread creation since.
	checked := checkLowered(t, "after execve", "")

	stop := make(chan struct{})
	var made atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A goroutine that exits locked takes its thread with it,
				// so the runtime keeps starting new ones.
				done := make(chan struct{})
				go func() {
					runtime.LockOSThread()
					close(done)
				}()
				<-done
				made.Add(1)
			}
		})
	}
	a, err := Lower()
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("Lower: %v", err)
	}
	for made.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	checked += checkLowered(t, "while threads start", a.CPU)
	close(stop)
	wg.Wait()
	checked += checkLowered(t, "after", a.CPU)
	if a.Threads == 0 || a.IOClass != ClassBestEffort || a.IOLevel != 7 {
		t.Errorf("Lower reported %+v", a)
	}
	if !t.Failed() {
		fmt.Printf("%s: %d thread readings, %d threads started, %s\n", childDone, checked, made.Load(), a.CPU)
	}
}

// A marker inherited from another process (its value is that process's
// ID) does not pass for this one, and Reexecuted removes it either way.
func TestReexecutedIgnoresAnotherProcessMarker(t *testing.T) {
	t.Setenv(MarkerEnv, strconv.Itoa(os.Getpid()+1))
	if Reexecuted() {
		t.Error("Reexecuted took another process's marker for this one's")
	}
	if v, ok := os.LookupEnv(MarkerEnv); ok {
		t.Errorf("%s=%s is still set after Reexecuted", MarkerEnv, v)
	}
	env := withoutMarker([]string{"A=1", MarkerEnv + "=7", "NOTIFY_SOCKET=/run/x", MarkerEnv + "X=2"})
	if got := strings.Join(env, " "); got != "A=1 NOTIFY_SOCKET=/run/x "+MarkerEnv+"X=2" {
		t.Errorf("withoutMarker: %s", got)
	}
}

// Lower changes every thread of the process, and threads started after it
// (as the Go runtime starts them for blocking calls) inherit the low
// priority: read back from /proc and ioprio_get for each thread.
func TestLowerEveryThread(t *testing.T) {
	a, err := Lower()
	if err != nil {
		t.Fatalf("Lower: %v", err)
	}
	t.Logf("applied: %+v", a)
	if a.Threads == 0 || a.IOClass != ClassBestEffort || a.IOLevel != 7 {
		t.Fatalf("Lower reported %+v", a)
	}
	// Force new OS threads: goroutines locked to their thread, all held
	// at once.
	var started, release sync.WaitGroup
	release.Add(1)
	for range 8 {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started.Done()
			release.Wait()
		}()
	}
	started.Wait()
	ts, err := Threads(0)
	release.Done()
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) <= a.Threads {
		t.Logf("no thread was added after Lower (%d threads)", len(ts))
	}
	const schedIdle = 5
	for _, th := range ts {
		cpuOK := th.Policy == schedIdle || (a.CPU == "nice 19" && th.Nice == 19)
		if !cpuOK || th.IOClass != ClassBestEffort || th.IOLevel != 7 {
			t.Errorf("thread %d: policy %d, nice %d, I/O class %d level %d; want %s and best-effort 7", th.TID, th.Policy, th.Nice, th.IOClass, th.IOLevel, a.CPU)
		}
	}
}
