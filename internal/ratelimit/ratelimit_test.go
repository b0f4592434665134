package ratelimit

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

func TestNilIsUnlimited(t *testing.T) {
	var l *Limiter
	if err := l.Wait(context.Background(), 1<<40); err != nil {
		t.Fatal(err)
	}
	if New(0) != nil {
		t.Fatal("New(0) should be unlimited (nil)")
	}
}

// The pace is checked as a lower bound only: a limiter may never let bytes
// through faster than its rate (plus its burst), whatever the machine's load.
func TestPaceIsALowerBoundOnTime(t *testing.T) {
	l := New(4 << 20) // 4 MiB/s
	r := &Reader{R: bytes.NewReader(make([]byte, 2<<20)), L: l, Ctx: context.Background()}
	start := time.Now()
	n, err := io.Copy(io.Discard, r)
	if err != nil || n != 2<<20 {
		t.Fatalf("copy: %d, %v", n, err)
	}
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Fatalf("2 MiB at 4 MiB/s took %v, want at least ~450ms", el)
	}
}

// A received body is paced as a request body is: never faster than the
// rate (plus the burst).
func TestBodyPaceIsALowerBoundOnTime(t *testing.T) {
	b := &Body{R: bytes.NewReader(make([]byte, 2<<20)), L: New(4 << 20), Ctx: context.Background()}
	start := time.Now()
	n, err := io.CopyBuffer(io.Discard, b, make([]byte, 256<<10))
	if err != nil || n != 2<<20 {
		t.Fatalf("copy: %d, %v", n, err)
	}
	// The last read's wait is paid after its bytes: 7 of 8 reads paced.
	if el := time.Since(start); el < 350*time.Millisecond {
		t.Fatalf("2 MiB at 4 MiB/s took %v, want at least ~390ms", el)
	}
}

func TestWaitHonoursCancel(t *testing.T) {
	l := New(1)
	_ = l.Wait(context.Background(), 1) // use up the burst
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx, 1<<20); err == nil {
		t.Fatal("Wait returned nil on a cancelled context for a wait of days")
	}
}
