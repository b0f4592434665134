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
// place every half second. It is a no-op when not enabled.
type progress struct {
	w       io.Writer
	verb    string
	total   int64
	done    atomic.Int64
	start   time.Time
	stop    chan struct{}
	wg      sync.WaitGroup
	enabled bool
}

func newProgress(w io.Writer, verb string, total int64, enabled bool) *progress {
	p := &progress{w: w, verb: verb, total: total, start: time.Now(), stop: make(chan struct{}), enabled: enabled}
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
	done := p.done.Load()
	el := time.Since(p.start)
	eta := "-"
	if done > 0 && p.total > done {
		rem := time.Duration(float64(el) * float64(p.total-done) / float64(done))
		eta = rem.Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r\033[K%s %s / %s  %s  ETA %s", p.verb, units.FormatBytes(done), units.FormatBytes(p.total), units.FormatRate(done, el), eta)
}

// Close stops and erases the display.
func (p *progress) Close() {
	if p.enabled {
		close(p.stop)
		p.wg.Wait()
	}
}
