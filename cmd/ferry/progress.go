package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrylabs/ferry/internal/units"
)

// progress draws "verb  done / total  rate  ETA" on a terminal, redrawn in
// place every half second. It is a no-op when not enabled. The rate is an
// exponentially weighted average of the half-second rates (about the last
// 3 s), so a burst at the start or a pause does not swing the ETA.
type progress struct {
	w       io.Writer
	verb    string
	total   int64
	done    atomic.Int64
	start   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	enabled bool

	// Owned by loop.
	last     int64
	lastTime time.Time
	rate     float64 // bytes/s, smoothed; 0 until the first sample
}

// rateWeight is the weight of the newest half-second sample.
const rateWeight = 0.15

func newProgress(w io.Writer, verb string, total int64, enabled bool) *progress {
	now := time.Now()
	p := &progress{w: w, verb: verb, total: total, start: now, lastTime: now, stop: make(chan struct{}), enabled: enabled}
	if enabled {
		p.wg.Add(1)
		go p.loop()
	}
	return p
}

// Add counts n more bytes done.
func (p *progress) Add(n int64) { p.done.Add(n) }

func (p *progress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *progress) draw() {
	done, now := p.done.Load(), time.Now()
	if dt := now.Sub(p.lastTime).Seconds(); dt > 0 {
		inst := float64(done-p.last) / dt
		if p.rate == 0 {
			p.rate = inst
		} else {
			p.rate = rateWeight*inst + (1-rateWeight)*p.rate
		}
		p.last, p.lastTime = done, now
	}
	eta := "-"
	switch {
	case p.total > 0 && done >= p.total:
		eta = "-, finishing"
	case p.rate > 0:
		eta = time.Duration(float64(p.total-done) / p.rate * float64(time.Second)).Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r\033[K%s %s / %s  %s/s  ETA %s", p.verb, units.FormatBytes(done), units.FormatBytes(p.total),
		units.FormatBytes(int64(p.rate)), eta)
}

// Close stops and erases the display.
func (p *progress) Close() {
	if p.enabled {
		close(p.stop)
		p.wg.Wait()
	}
}
