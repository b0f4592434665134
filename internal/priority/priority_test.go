//go:build linux

package priority

import (
	"runtime"
	"sync"
	"testing"
)

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
