package soak

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Sample is what one checkpoint measured of the agent.
type Sample struct {
	// Label is the step written when the sample was taken, or "end"
	// once the agent drained.
	Label   string
	Step    int
	Elapsed time.Duration
	// Committed counts the steps the agent committed
	// (ferry_steps_committed_total); Last is the newest one.
	Committed, Last int64
	RSSKiB          int64 // VmRSS
	AnonKiB         int64 // RssAnon
	HeapKiB         int64 // go_memstats_heap_inuse_bytes
	FDs             int   // entries of /proc/PID/fd
	Goroutines      int64 // go_goroutines
	Watches         int   // inotify wd: lines over /proc/PID/fdinfo
	JournalBytes    int64 // journal.json
	UploadFiles     int   // files under uploads/ (resume state of pushes in flight)
	UploadBytes     int64
	StateBytes      int64 // every file under the agent's state folder
	LocalSteps      int   // step folders in the watch dir
}

// probe reads one sample from the agent's /proc entries, its metrics
// endpoint and its state folder.
type probe struct {
	pid      int
	metrics  string // http://ADDR/metrics
	stateDir string // the base given to --state-dir
	watch    string
	client   *http.Client
}

func (p *probe) sample(ctx context.Context) (Sample, error) {
	var s Sample
	var err error
	if err := p.rss(&s); err != nil {
		return s, err
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid))
	if err != nil {
		return s, fmt.Errorf("count descriptors: %w", err)
	}
	s.FDs = len(fds)
	if s.Watches, err = p.watches(fds); err != nil {
		return s, err
	}
	m, err := p.scrape(ctx)
	if err != nil {
		return s, err
	}
	s.Goroutines = int64(m["go_goroutines"])
	s.HeapKiB = int64(m["go_memstats_heap_inuse_bytes"]) / 1024
	s.Committed = int64(m["ferry_steps_committed_total"])
	s.Last = int64(m["ferry_last_committed_step"])
	if err := p.state(&s); err != nil {
		return s, err
	}
	steps, err := os.ReadDir(p.watch)
	if err != nil {
		return s, fmt.Errorf("list the watch dir: %w", err)
	}
	s.LocalSteps = len(steps)
	return s, nil
}

// rss reads VmRSS and its anonymous part (RssAnon: the heap, stacks; the
// rest is mostly the binary's code, paged in as new paths run).
func (p *probe) rss(s *Sample) error {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return fmt.Errorf("read agent status: %w", err)
	}
	found := 0
	for line := range strings.SplitSeq(string(raw), "\n") {
		for _, f := range []struct {
			key string
			dst *int64
		}{{"VmRSS:", &s.RSSKiB}, {"RssAnon:", &s.AnonKiB}} {
			if rest, ok := strings.CutPrefix(line, f.key); ok {
				if *f.dst, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err != nil {
					return fmt.Errorf("read agent status: %s: %w", line, err)
				}
				found++
			}
		}
	}
	if found != 2 {
		return fmt.Errorf("no VmRSS or RssAnon in /proc/%d/status", p.pid)
	}
	return nil
}

// watches counts inotify watches: one "inotify wd:" line per watch in the
// fdinfo of each inotify descriptor.
func (p *probe) watches(fds []os.DirEntry) (int, error) {
	n := 0
	for _, fd := range fds {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", p.pid, fd.Name()))
		if err != nil {
			continue // closed since listed
		}
		n += bytes.Count(raw, []byte("inotify wd:"))
	}
	return n, nil
}

// scrape reads the unlabelled samples of the metrics endpoint.
func (p *probe) scrape(ctx context.Context) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.metrics, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape agent metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape agent metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read agent metrics: %w", err)
	}
	return out, nil
}

// state sizes the agent's state folder: journal, upload state, the rest.
func (p *probe) state(s *Sample) error {
	return filepath.WalkDir(p.stateDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil // a file renamed away mid-walk
		}
		info, err := d.Info()
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") && strings.HasSuffix(d.Name(), ".tmp") {
			return nil // a state file being rewritten (internal/atomicfile), renamed over it a moment later
		}
		s.StateBytes += info.Size()
		switch {
		case d.Name() == "journal.json":
			s.JournalBytes += info.Size()
		case strings.Contains(path, string(filepath.Separator)+"uploads"+string(filepath.Separator)):
			s.UploadFiles++
			s.UploadBytes += info.Size()
		}
		return nil
	})
}
