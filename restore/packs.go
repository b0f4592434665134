package restore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"go.uber.org/zap"
)

// Packed files (manifest format 3) are ranges of pack objects. Neighbouring
// files of a pack are fetched together, a run of them per ranged GET, and
// each is written to a temp file of its own, checked against its BLAKE3 and
// staged for commit as its last byte passes. A file the run could not
// restore (a body that broke, a hash that did not match) is then fetched
// on its own, like any file, with the same retries.

// Run sizes: a run holds at most maxRunFiles files and runTarget bytes,
// the packed bytes spread over runSpread GETs (within minRun..ChunkSize)
// so that a restore of a few packs still has GETs for every worker.
const (
	maxRunFiles = 4096
	runSpread   = 64
	minRun      = 1 << 20
	runBuf      = 256 << 10
)

// run is neighbouring packed files of one pack, fetched with one GET.
type run struct {
	jobs []*fileJob
	seq  int // the lowest plan position of its files
	// keep[i] is set when jobs[i] is already in place: its bytes are read
	// past. placed[i] once the run restored jobs[i].
	keep, placed []bool
}

// span is the run's byte range in its pack.
func (u *run) span() (off, end int64) {
	first, last := u.jobs[0].file, u.jobs[len(u.jobs)-1].file
	return first.Offset, last.Offset + last.Size
}

// packRuns groups the plan's packed files into runs: files of one pack in
// the order of their offsets, each run contiguous and within the size and
// file bounds. It returns the runs and the indices of the other files.
func packRuns(files []fileJob, chunk int64) (runs []*run, single []int) {
	var packed []*fileJob
	pos := map[*fileJob]int{}
	var total int64
	for i := range files {
		if f := files[i].file; f.Packed() {
			packed = append(packed, &files[i])
			pos[&files[i]] = i
			total += f.Size
			continue
		}
		single = append(single, i)
	}
	sort.SliceStable(packed, func(a, b int) bool {
		fa, fb := packed[a].file, packed[b].file
		return fa.Key < fb.Key || fa.Key == fb.Key && fa.Offset < fb.Offset
	})
	target := min(max(total/runSpread, minRun), chunk)
	var cur *run
	var size int64
	for _, j := range packed {
		if cur != nil {
			prev := cur.jobs[len(cur.jobs)-1].file
			if prev.Key != j.file.Key || prev.Offset+prev.Size != j.file.Offset || size+j.file.Size > target || len(cur.jobs) == maxRunFiles {
				cur = nil
			}
		}
		if cur == nil {
			cur, size = &run{seq: pos[j]}, 0
			runs = append(runs, cur)
		}
		cur.seq = min(cur.seq, pos[j])
		cur.jobs = append(cur.jobs, j)
		size += j.file.Size
	}
	for _, u := range runs {
		u.keep, u.placed = make([]bool, len(u.jobs)), make([]bool, len(u.jobs))
	}
	return runs, single
}

// unit is what one goroutine of fetchAll restores: the plan's file seq,
// or a run of packed files.
type unit struct {
	seq int
	run *run
}

// planUnits are the plan's files, runs of packed files in place of those
// files, in plan order (a run at its first file's place).
func planUnits(p *plan, chunk int64) []unit {
	runs, single := packRuns(p.files, chunk)
	out := make([]unit, 0, len(runs)+len(single))
	for _, u := range runs {
		out = append(out, unit{seq: u.seq, run: u})
	}
	for _, i := range single {
		out = append(out, unit{seq: i})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].seq < out[b].seq })
	return out
}

// restoreRun restores a run's files: those in place are kept, the others
// fetched with one GET (a worker's fetchRun) and, if that left any,
// one by one.
func (r *restorer) restoreRun(ctx context.Context, u *run) error {
	fetch := false
	for i, job := range u.jobs {
		keep, err := r.keep(ctx, job)
		if err != nil {
			return err
		}
		u.keep[i] = keep
		fetch = fetch || !keep
	}
	if fetch {
		t := newTransfer(u.jobs[0], u.seq, nil, r.opts.ChunkSize, 0)
		t.run, t.chunks = u, 1
		r.queue.push(t)
		_, err := r.awaitSum(ctx, t)
		r.queue.drop(t)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var werr *writeError
		if errors.As(err, &werr) {
			return err
		}
		if err != nil {
			r.log.Debug("fetching the rest of a run file by file", zap.String("first", u.jobs[0].file.Path), zap.Error(err))
		}
	}
	for i, job := range u.jobs {
		if u.keep[i] || u.placed[i] {
			continue
		}
		if err := r.restoreFile(ctx, job, u.seq); err != nil {
			return err
		}
	}
	return nil
}

// fetchRun is a worker's GET of a run: the files' bytes pass through its
// buffer in order, each into a temp file of its own, hashed and placed once
// complete (runSink). A file whose hash does not match is left for
// restoreRun to fetch again; a body that breaks ends the run there.
func (w *chunkWriter) fetchRun(ctx context.Context, t *transfer) error {
	u := t.run
	off, end := u.span()
	weight := min(max(end-off, minGetWeight), w.r.opts.InFlightBytes)
	if err := w.r.inflight.Acquire(ctx, weight); err != nil {
		return err
	}
	defer w.r.inflight.Release(weight)
	// The files are small: a 256 KiB buffer passes them in a few reads,
	// and hundreds of runs in flight do not each zero a MiB.
	class := bufClass(min(end-off, runBuf))
	buf := w.r.getBuffer(class)
	defer w.r.bufs[class].Put(&buf)
	s := &runSink{w: w, u: u}
	defer s.abort()
	if err := s.advance(); err != nil || s.i == len(u.jobs) {
		return err // a run of empty files needs no GET
	}
	asked := time.Now()
	rc, err := w.r.bucket.Get(ctx, t.job.file.Key, off, end-off)
	if err != nil {
		return err
	}
	w.r.ttfb.observe(time.Since(asked))
	defer rc.Close()
	body := guardBody(rc, w.r.opts.LowSpeedLimit, w.r.opts.LowSpeedTime)
	for s.i < len(u.jobs) {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Whole-buffer reads go straight from the socket into buf (the
		// connection's reader copies only reads smaller than its own
		// buffer); runSink cuts them at file boundaries.
		n, rerr := body.Read(buf)
		if err := s.write(buf[:n]); err != nil {
			return err
		}
		if rerr == io.EOF && s.i < len(u.jobs) {
			rerr = io.ErrUnexpectedEOF
		}
		if rerr != nil && rerr != io.EOF {
			job := u.jobs[s.i].file
			return fmt.Errorf("%s: bytes %d-%d of %s: %w", job.Path, job.Offset+s.pos, job.Offset+job.Size-1, job.Key, rerr)
		}
	}
	return nil
}

// runSink writes the files of a run as its bytes pass: file i of the run
// is open (unless kept, when its bytes are read past) with pos of its bytes
// written and hashed.
type runSink struct {
	w   *chunkWriter
	u   *run
	i   int
	pos int64
	f   *os.File
	tmp string
}

// write takes the run's next bytes.
func (s *runSink) write(p []byte) error {
	for len(p) > 0 {
		if s.i == len(s.u.jobs) {
			return errTooLong
		}
		job := s.u.jobs[s.i]
		k := min(int64(len(p)), job.file.Size-s.pos)
		if !s.u.keep[s.i] {
			s.w.whole.Write(p[:k])
			if _, err := writeAt(s.f, p[:k], s.pos, true); err != nil {
				return &writeError{err}
			}
			s.w.r.addFetched(k)
			s.w.r.progress(job, s.pos+k)
		}
		s.pos += k
		p = p[k:]
		if s.pos == job.file.Size {
			if err := s.finish(); err != nil {
				return err
			}
			s.i++
			if err := s.advance(); err != nil {
				return err
			}
		}
	}
	return nil
}

// advance opens file i (and finishes the empty files from it on), or
// leaves i at the end of the run.
func (s *runSink) advance() error {
	for ; s.i < len(s.u.jobs); s.i++ {
		job := s.u.jobs[s.i]
		s.pos = 0
		if !s.u.keep[s.i] {
			f, tmp, err := s.w.r.createTemp(job.rel)
			if err != nil {
				return &writeError{fmt.Errorf("restore %s: %w", job.file.Path, err)}
			}
			s.f, s.tmp = f, tmp
			s.w.whole.Reset()
		}
		if job.file.Size > 0 {
			return nil
		}
		if err := s.finish(); err != nil {
			return err
		}
	}
	return nil
}

// finish checks the complete file i against its BLAKE3 and places it; a
// mismatch leaves it for restoreRun (logged).
func (s *runSink) finish() error {
	job := s.u.jobs[s.i]
	if s.u.keep[s.i] {
		return nil
	}
	if sum := hex.EncodeToString(s.w.whole.Sum(nil)); sum != job.file.BLAKE3 {
		s.w.r.log.Warn("packed file does not match its hash; fetching it again", zap.String("path", job.file.Path), zap.String("got", sum))
		s.abort()
		return nil
	}
	f := s.f
	s.f = nil
	if err := s.w.r.stage(f, s.tmp, job); err != nil {
		f.Close()
		s.w.r.root.Remove(s.tmp)
		return &writeError{fmt.Errorf("restore %s: %w", job.file.Path, err)}
	}
	s.u.placed[s.i] = true
	s.w.r.mu.Lock()
	s.w.r.downloaded++
	s.w.r.mu.Unlock()
	return nil
}

// abort removes the temp file of a file not placed.
func (s *runSink) abort() {
	if s.f != nil {
		s.f.Close()
		s.w.r.root.Remove(s.tmp)
		s.f = nil
	}
}

// addFetched counts n bytes fetched into Result.BytesDownloaded.
func (r *restorer) addFetched(n int64) {
	r.mu.Lock()
	r.fetched += n
	r.mu.Unlock()
}
