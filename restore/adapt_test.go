package restore

import (
	"testing"
	"time"
)

func TestWantWorkers(t *testing.T) {
	for _, c := range []struct {
		ttfb  time.Duration
		limit int
		want  int
	}{
		{0, 256, 16}, {time.Millisecond, 256, 16}, {10 * time.Millisecond, 256, 16}, {11 * time.Millisecond, 256, 32},
		{80 * time.Millisecond, 256, 128}, {150 * time.Millisecond, 256, 240}, {time.Second, 256, 256}, {80 * time.Millisecond, 4, 4},
	} {
		if got := wantWorkers(c.ttfb, c.limit); got != c.want {
			t.Errorf("wantWorkers(%v, %d) = %d, want %d", c.ttfb, c.limit, got, c.want)
		}
	}
}

func TestTTFBMeterKeepsTheRoundTrip(t *testing.T) {
	var m ttfbMeter
	for i := range minSamples - 1 {
		m.observe(time.Duration(80+i) * time.Millisecond)
	}
	if m.get() != 0 {
		t.Fatalf("after %d samples: %v, want 0 until %d", minSamples-1, m.get(), minSamples)
	}
	m.observe(300 * time.Millisecond) // queued behind others
	if m.get() != 80*time.Millisecond {
		t.Fatalf("round trip %v, want the smallest sample, 80ms", m.get())
	}
}

// The manifest's round trip stands in until the data GETs have samples
// of their own, and then gives way to them.
func TestTTFBMeterSeed(t *testing.T) {
	m := &ttfbMeter{seed: 90 * time.Millisecond}
	if m.get() != 90*time.Millisecond {
		t.Fatalf("before any sample: %v, want the seed", m.get())
	}
	for range minSamples {
		m.observe(40 * time.Millisecond)
	}
	if m.get() != 40*time.Millisecond {
		t.Fatalf("after %d samples: %v, want theirs, 40ms", minSamples, m.get())
	}
	if n := wantWorkers((&ttfbMeter{}).get(), 256); n != baseWorkers {
		t.Fatalf("no seed, no samples: %d workers, want %d", n, baseWorkers)
	}
}
