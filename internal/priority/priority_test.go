//go:build linux

package priority

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
)

// This test comes first in the file: tests run in source order, and the
// ones below lower this process for good.
//
// Threads started while Lower runs (the agent's runtime starts them at
// any moment) end up lowered too: goroutines keep creating OS threads
// during Lower, and every thread alive afterwards is read back. Lower
// changes the whole process for good, so each try runs in a fresh child
// process (the test binary again); a Lower that lists threads once failed
// about one try in three.
func TestLowerWhileThreadsStart(t *testing.T) {
	if os.Getenv("FERRY_PRIORITY_CHILD") == "1" {
		lowerWhileThreadsStart(t)
		return
	}
	if lowered(t) {
		t.Skip("this process was lowered by an earlier test, and its children would inherit that")
	}
	for i := range 10 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLowerWhileThreadsStart$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FERRY_PRIORITY_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("try %d: %v\n%s", i, err, out)
		}
	}
}

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

func lowerWhileThreadsStart(t *testing.T) {
	if lowered(t) {
		t.Fatal("the child process started lowered: it cannot show the race")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
			}
		}()
	}
	a, err := Lower()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Lower: %v", err)
	}
	ts, err := Threads(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, th := range ts {
		cpuOK := th.Policy == 5 || (a.CPU == "nice 19" && th.Nice == 19)
		if !cpuOK || th.IOClass != ClassBestEffort || th.IOLevel != 7 {
			t.Errorf("thread %d: policy %d, nice %d, I/O class %d level %d; want %s and best-effort 7", th.TID, th.Policy, th.Nice, th.IOClass, th.IOLevel, a.CPU)
		}
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
