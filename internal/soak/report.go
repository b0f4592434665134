package soak

import (
	"fmt"
	"io"
	"time"
)

func (s Sample) line() string {
	return fmt.Sprintf("step %-5s %7s committed %5d (newest %5d) RSS %6.1f MiB (anon %5.1f) heap %5.1f MiB fds %3d goroutines %3d watches %3d journal %7d B uploads %d files %d B state %7d B local steps %d",
		s.Label, s.Elapsed.Round(time.Second), s.Committed, s.Last, float64(s.RSSKiB)/1024, float64(s.AnonKiB)/1024, float64(s.HeapKiB)/1024, s.FDs, s.Goroutines, s.Watches,
		s.JournalBytes, s.UploadFiles, s.UploadBytes, s.StateBytes, s.LocalSteps)
}

// WriteTable writes the samples as a Markdown table.
func WriteTable(w io.Writer, samples []Sample) {
	fmt.Fprintln(w, "| step | elapsed | committed | RSS MiB | of it anonymous | Go heap in use MiB | fds | goroutines | inotify watches | journal bytes | upload state files (bytes) | state dir bytes | local steps |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range samples {
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %.1f | %.1f | %d | %d | %d | %d | %d (%d) | %d | %d |\n",
			s.Label, s.Elapsed.Round(time.Second), s.Committed, float64(s.RSSKiB)/1024, float64(s.AnonKiB)/1024, float64(s.HeapKiB)/1024, s.FDs, s.Goroutines,
			s.Watches, s.JournalBytes, s.UploadFiles, s.UploadBytes, s.StateBytes, s.LocalSteps)
	}
}

// Targets are the soak's pass marks. The end sample, taken once the agent
// committed the last step and --keep-local deleted the older ones, is
// compared with the baseline: the first sample at or after WarmUp steps.
// Samples in between are reported, not judged, except for watches: how
// far the agent is behind moves with the machine's load, and with it the
// uploads in flight and the steps on disk.
type Targets struct {
	WarmUp int
	// RSS at the end within RSSRatio of the baseline, or RSSSlackKiB,
	// whichever is larger (Go's heap moves by a few MiB with the GC's
	// timing, which is most of a small agent's RSS).
	RSSRatio    float64
	RSSSlackKiB int64
	// Descriptors, goroutines and watches at the end within these of the
	// baseline; at every sample, at most WatchesPerStep watches for each
	// step folder on disk and the watch dir, plus WatchSlack.
	FDSlack, GoroutineSlack, WatchSlack, WatchesPerStep int
	// Journal and state at most StateRatio times the baseline plus
	// StateSlack bytes, at every sample: with --keep-local they must not
	// grow with the steps seen.
	StateRatio float64
	StateSlack int64
}

// DefaultTargets returns the targets for a run of steps: RSS within
// 10% of the baseline, and for a short run (under 5,000 steps, as
// TestSoakShort's) within 4 MiB where that is more, since there the GC's
// timing is most of what moves.
func DefaultTargets(steps, every int) Targets {
	slack := int64(4 << 10)
	if steps >= 5000 {
		slack = 0
	}
	return Targets{
		WarmUp: max(every, min(500, steps/2)), RSSRatio: 0.10, RSSSlackKiB: slack,
		FDSlack: 4, GoroutineSlack: 8, WatchSlack: 4, WatchesPerStep: 2,
		StateRatio: 1.25, StateSlack: 8 << 10,
	}
}

// Check returns one line per target that the samples miss (nil: all met).
func Check(samples []Sample, t Targets) []string {
	base := -1
	for i, s := range samples {
		if s.Label != "end" && s.Step >= t.WarmUp {
			base = i
			break
		}
	}
	if base < 0 || base == len(samples)-1 || samples[len(samples)-1].Label != "end" {
		return []string{fmt.Sprintf("no sample after the warm-up of %d steps and at the end to compare", t.WarmUp)}
	}
	b, end := samples[base], samples[len(samples)-1]
	var fails []string
	if limit := b.RSSKiB + max(int64(float64(b.RSSKiB)*t.RSSRatio), t.RSSSlackKiB); end.RSSKiB > limit {
		fails = append(fails, fmt.Sprintf("RSS %d KiB at the end, over %d KiB (step %s: %d KiB)", end.RSSKiB, limit, b.Label, b.RSSKiB))
	}
	for _, c := range []struct {
		what      string
		got, want int64
		slack     int
	}{
		{"descriptors", int64(end.FDs), int64(b.FDs), t.FDSlack},
		{"goroutines", end.Goroutines, b.Goroutines, t.GoroutineSlack},
		{"inotify watches", int64(end.Watches), int64(b.Watches), t.WatchSlack},
	} {
		if c.got > c.want+int64(c.slack) {
			fails = append(fails, fmt.Sprintf("%s %d at the end, over %d at step %s plus %d", c.what, c.got, c.want, b.Label, c.slack))
		}
	}
	for _, s := range samples {
		if limit := t.WatchesPerStep*(s.LocalSteps+1) + t.WatchSlack; s.Watches > limit {
			fails = append(fails, fmt.Sprintf("inotify watches %d at step %s, over %d for %d step folders on disk", s.Watches, s.Label, limit, s.LocalSteps))
		}
	}
	for _, s := range samples[base+1:] {
		for _, c := range []struct {
			what      string
			got, want int64
		}{{"journal bytes", s.JournalBytes, b.JournalBytes}, {"state dir bytes", s.StateBytes, b.StateBytes}} {
			if limit := int64(float64(c.want)*t.StateRatio) + t.StateSlack; c.got > limit {
				fails = append(fails, fmt.Sprintf("%s %d at step %s, over %d (step %s: %d)", c.what, c.got, s.Label, limit, b.Label, c.want))
			}
		}
	}
	return fails
}
