package restore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Packed files (manifest format 3) are ranges of pack objects. Neighbouring
// files of a pack are fetched together, a run of them per ranged GET, and
// each is written to a temp file of its own, checked against its BLAKE3 and
// renamed into place as its last byte passes. A file the run could not
// restore (a body that broke, a hash that did not match) is then fetched
// on its own, like any file, with the same retries.

// Run sizes: a run holds at most maxRunFiles files and runTarget bytes,
// the packed bytes spread over runSpread GETs (within minRun..ChunkSize)
// so that a restore of a few packs still has GETs for every worker.
const (
	maxRunFiles = 4096
	runSpread   = 64
	minRun      = 1 << 20
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
	sort.Slice(runs, func(a, b int) bool { return runs[a].seq < runs[b].seq })
	return runs, single
}

// restoreRun restores a run's files: those in place are kept, the others
// fetched with one GET (a worker's fetchRun) and, if that left any,
// one by one.
func (r *restorer) restoreRun(ctx context.Context, u *run, seq int) error {
	fetch := false
	for i, job := range u.jobs {
		keep, err := r.keepExisting(ctx, job)
		if err != nil {
			return fmt.Errorf("check existing %s: %w", job.file.Path, err)
		}
		if u.keep[i] = keep; keep {
			r.mu.Lock()
			r.kept++
			r.mu.Unlock()
			r.progress(job, job.file.Size)
			continue
		}
		fetch = true
	}
	if fetch {
		t := newTransfer(u.jobs[0], seq, nil, r.opts.ChunkSize, 0)
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
		if err := r.restoreFile(ctx, job, seq); err != nil {
			return err
		}
	}
	return nil
}

// fetchRun is a worker's GET of a run: the files' bytes pass through its
// buffer in order, each into a temp file of its own, hashed and placed once
// complete. A file whose hash does not match is left for restoreRun to
// fetch again; a body that breaks ends the run there.
func (w *chunkWriter) fetchRun(ctx context.Context, t *transfer) error {
	u := t.run
	off, end := u.span()
	weight := min(max(end-off, minGetWeight), w.r.opts.InFlightBytes)
	if err := w.r.inflight.Acquire(ctx, weight); err != nil {
		return err
	}
	defer w.r.inflight.Release(weight)
	class := bufClass(end - off)
	buf := w.r.getBuffer(class)
	defer w.r.bufs[class].Put(&buf)
	var body io.Reader = strings.NewReader("") // a run of empty files
	if end > off {
		asked := time.Now()
		rc, err := w.r.bucket.Get(ctx, t.job.file.Key, off, end-off)
		if err != nil {
			return err
		}
		w.r.ttfb.observe(time.Since(asked))
		defer rc.Close()
		body = guardBody(rc, w.r.opts.LowSpeedLimit, w.r.opts.LowSpeedTime)
	}
	for i, job := range u.jobs {
		if u.keep[i] {
			if _, err := io.CopyBuffer(io.Discard, io.LimitReader(body, job.file.Size), buf); err != nil {
				return err
			}
			continue
		}
		ok, err := w.runFile(ctx, body, job, buf)
		if err != nil {
			return err
		}
		u.placed[i] = ok
	}
	return nil
}

// runFile copies one file of a run from body into a temp file, hashing it,
// and places it when its BLAKE3 matches (true). A mismatch returns false:
// the file's bytes were read, so the run goes on.
func (w *chunkWriter) runFile(ctx context.Context, body io.Reader, job *fileJob, buf []byte) (bool, error) {
	f, tmp, err := w.r.createTemp(job.rel)
	if err != nil {
		return false, &writeError{fmt.Errorf("restore %s: %w", job.file.Path, err)}
	}
	placed := false
	defer func() {
		if !placed {
			f.Close()
			w.r.root.Remove(tmp)
		}
	}()
	w.whole.Reset()
	var pos int64
	for pos < job.file.Size {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		n, rerr := io.ReadFull(body, buf[:min(int64(len(buf)), job.file.Size-pos)])
		w.whole.Write(buf[:n])
		if _, err := writeAt(f, buf[:n], pos, true); err != nil {
			return false, &writeError{err}
		}
		pos += int64(n)
		w.r.addFetched(int64(n))
		w.r.progress(job, pos)
		if rerr != nil {
			return false, fmt.Errorf("%s: bytes %d-%d of %s: %w", job.file.Path, job.file.Offset+pos, job.file.Offset+job.file.Size-1, job.file.Key, rerr)
		}
	}
	if sum := hex.EncodeToString(w.whole.Sum(nil)); sum != job.file.BLAKE3 {
		w.r.log.Warn("packed file does not match its hash; fetching it again", zap.String("path", job.file.Path), zap.String("got", sum))
		return false, nil
	}
	if err := w.r.place(f, tmp, job); err != nil {
		return false, &writeError{fmt.Errorf("restore %s: %w", job.file.Path, err)}
	}
	placed = true
	w.r.mu.Lock()
	w.r.downloaded++
	w.r.mu.Unlock()
	return true, nil
}

// addFetched counts n bytes fetched into Result.BytesDownloaded.
func (r *restorer) addFetched(n int64) {
	r.mu.Lock()
	r.fetched += n
	r.mu.Unlock()
}
