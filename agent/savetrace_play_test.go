package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/internal/dcprecord/dcprecordtest"
	"github.com/ferrylabs/ferry/internal/savetrace"
)

// heldFile is a file an actor created and holds open.
type heldFile struct {
	fh     *os.File
	rel    string
	data   []byte
	off    int
	chunks []int64
}

// save plays the trace's save of step n through f: f.crashAt (set by the
// schedule) kills the job at that operation, which a write or an append
// leaves cut short and any other operation leaves undone; the files the
// job held open are closed by its death, as the kernel does.
func (r *traceRun) save(f *fz, n int64) {
	if !containsStep(r.begun, n) {
		r.begun = append(r.begun, n)
	}
	seq := expand(r.tr, r.vars(n), f.rng)
	l := r.layout()
	key := strconv.FormatInt(n, 10)
	held := map[string]*heldFile{}
	shift := time.Duration(0)
	if r.clockSave == n && r.clockStep != 0 {
		shift = r.clockStep
	}
	clockAt := -1
	if shift != 0 {
		clockAt = f.rng.Intn(fileOps(seq) + 1)
		f.note("  the clock steps by %v before operation %d", shift, clockAt+1)
	}
	done := 0
	for _, s := range seq {
		if s.sync() {
			switch {
			case f.dead:
			case s.op.Kind == savetrace.Complete:
				r.completed(f, l, key, n)
			case s.op.Kind == savetrace.RaiseIfExists && r.exists(f, s.actor, s.args[0]):
				// Accelerate's save_state refuses a checkpoint folder that
				// exists (a killed save of the step left it): Python
				// raises, and the job dies here.
				f.dead = true
				f.note("  %s exists: the framework raises, the job dies here", s.args[0])
			}
			continue
		}
		if f.dead {
			break
		}
		if done > 0 && r.gap > 0 {
			f.sleep(time.Duration(f.rng.Int63n(int64(r.gap) + 1)))
		}
		var stamp time.Duration
		if clockAt >= 0 && done >= clockAt {
			stamp = shift
		}
		done++
		r.otherSteps(f, l, n, s, func() { r.step(f, s, held, stamp) })
		if l.single {
			f.completed("single", "")
		}
	}
	for _, h := range held {
		_ = h.fh.Close()
	}
}

// completed records the state the trace's complete marks.
func (r *traceRun) completed(f *fz, l fuzzLayout, key string, n int64) {
	if l.single {
		f.completed("single", "")
		return
	}
	f.completedState(key, n, l.state(f, n))
}

// otherSteps runs op, which may delete or change other steps of the
// schedule (a rotation, a pointer), and records what it did to each as
// the fuzzer's cut does: deleted whole from its last completed state, or
// gone.
func (r *traceRun) otherSteps(f *fz, l fuzzLayout, n int64, s traceStep, op func()) {
	dir := l.dir(n)
	inside := dir != ""
	for _, a := range s.args {
		inside = inside && (a == dir || strings.HasPrefix(a, dir+"/"))
	}
	if inside || l.single {
		op()
		return
	}
	before := map[int64]fileState{}
	for _, m := range r.begun {
		if m != n {
			before[m] = l.state(f, m)
		}
	}
	op()
	for m, was := range before {
		now := l.state(f, m)
		if maps.Equal(was, now) {
			continue
		}
		key := strconv.FormatInt(m, 10)
		last := lastOf(f.complete[key])
		whole := last != nil && maps.Equal(was, last) && !holdsTemp(last)
		if whole && len(now) == 0 {
			f.deleted[key] = true
		} else if !maps.Equal(now, last) {
			f.gone[key] = true
		}
	}
}

// step runs one operation; stamp, when not 0, shifts the mtimes of what
// it writes (a stepped clock).
func (r *traceRun) step(f *fz, s traceStep, held map[string]*heldFile, stamp time.Duration) {
	crash := f.next()
	a := s.args
	var err error
	var wrote string
	switch s.op.Kind {
	case savetrace.Write:
		wrote, err = a[0], r.write(f, s.actor, a[0], int(s.size), crash)
	case savetrace.Create:
		if !crash {
			wrote, err = a[0], r.create(f, s, held)
		}
	case savetrace.Append:
		wrote, err = a[0], r.append(f, s, held, crash)
	case savetrace.Close:
		h := held[s.actor+" "+a[0]]
		delete(held, s.actor+" "+a[0])
		f.markTorn(a[0], false)
		f.note("  close %s (%d bytes)", a[0], h.off)
		err = h.fh.Close()
	default:
		if !crash {
			wrote, err = r.other(f, s)
		}
	}
	switch {
	case err != nil && s.op.Kind == savetrace.Rename && (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)):
		// The framework's own rename fails as it does for the trainer
		// (HF 4.36's os.rename of tmp-checkpoint-N onto a checkpoint-N
		// a re-save of the step finds there): Python raises, and the
		// job dies at this operation.
		f.dead = true
		f.note("  rename %s failed (%v): the framework raises, the job dies here", a[0], err)
	case err != nil:
		r.fails = append(r.fails, fmt.Sprintf("%s:%d: %s %s: %v", r.tr.File, s.op.Line, s.op.Kind, strings.Join(a, " "), err))
	}
	if wrote != "" && stamp != 0 {
		at := time.Now().Add(stamp)
		_ = os.Chtimes(r.abs(f, s.actor, wrote), at, at)
	}
}

// exists reports whether rel is there for actor, as os.path.exists sees it.
func (r *traceRun) exists(f *fz, actor, rel string) bool {
	_, err := os.Stat(r.abs(f, actor, rel))
	return err == nil
}

// write is torch.save's open(O_TRUNC), write, close; killed, a prefix.
func (r *traceRun) write(f *fz, actor, rel string, size int, crash bool) error {
	data := f.content(rel, size)
	f.markTorn(rel, crash)
	if crash && len(data) > 0 {
		data = data[:f.rng.Intn(len(data))]
	}
	f.note("  write %s (%d bytes)", rel, len(data))
	return writeMade(r.abs(f, actor, rel), data)
}

func (r *traceRun) create(f *fz, s traceStep, held map[string]*heldFile) error {
	var total int64
	for _, c := range s.chunks {
		total += c
	}
	rel := s.args[0]
	p := r.abs(f, s.actor, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	fh, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	f.markTorn(rel, true) // held open, not whole until closed
	f.note("  create %s", rel)
	held[s.actor+" "+rel] = &heldFile{fh: fh, rel: rel, data: f.content(rel, int(total)), chunks: s.chunks}
	return nil
}

// append writes the next chunk of a held file; the last chunk ends the
// content (a format's end record); killed, part of the chunk.
func (r *traceRun) append(f *fz, s traceStep, held map[string]*heldFile, crash bool) error {
	h := held[s.actor+" "+s.args[0]]
	end := min(h.off+int(h.chunks[0]), len(h.data))
	if h.chunks = h.chunks[1:]; len(h.chunks) == 0 {
		end = len(h.data)
	}
	if crash && end > h.off {
		end = h.off + f.rng.Intn(end-h.off)
	}
	f.note("  append %s (%d bytes)", h.rel, end-h.off)
	_, err := h.fh.Write(h.data[h.off:end])
	h.off = end
	return err
}

// other runs the operations that write small files whole or change names
// (a kill leaves them undone); it returns the file written, if any.
func (r *traceRun) other(f *fz, s traceStep) (string, error) {
	a := s.args
	f.note("  %s %s", s.op.Kind, strings.Join(a, " "))
	abs := func(rel string) string { return r.abs(f, s.actor, rel) }
	switch s.op.Kind {
	case savetrace.Mkdir:
		return "", os.MkdirAll(abs(a[0]), 0o755)
	case savetrace.Text:
		return a[0], writeMade(abs(a[0]), []byte(a[1]))
	case savetrace.DCPMetadata:
		out := outOr(a, ".metadata")
		return out, writeMade(abs(out), dcprecordtest.Encode(r.sizesOf(f, a[0], ".distcp")))
	case savetrace.HFIndex:
		out := outOr(a, "model.safetensors.index.json")
		return out, writeMade(abs(out), hfIndex(r.sizesOf(f, a[0], ".safetensors")))
	case savetrace.Rename:
		f.markTorn(a[1], f.torn[a[0]])
		return "", os.Rename(abs(a[0]), abs(a[1]))
	case savetrace.Remove:
		if err := os.Remove(abs(a[0])); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", nil
	case savetrace.Rmtree:
		return "", os.RemoveAll(abs(a[0]))
	case savetrace.Symlink:
		return "", os.Symlink(a[0], abs(a[1]))
	}
	return "", fmt.Errorf("the replay cannot run %s", s.op.Kind)
}

// abs is where rel is for actor: under the watch dir of the actor's node,
// or under the scratch folder outside it that {tmp} names (a sibling of
// the watch dir, on the same filesystem).
func (r *traceRun) abs(f *fz, actor, rel string) string {
	dir := f.dir
	if len(r.dirs) > 1 {
		dir = r.dirs[r.nodeOf(actor)]
	}
	if rest, ok := strings.CutPrefix(rel, savetrace.Tmp+"/"); ok {
		return filepath.Join(dir+".scratch", filepath.FromSlash(rest))
	}
	return filepath.Join(dir, filepath.FromSlash(rel))
}

// nodeOf is the node of an actor's rank: the ranks in contiguous blocks.
func (r *traceRun) nodeOf(actor string) int {
	rank, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(actor, "/")[0], "r"))
	return rank * len(r.dirs) / r.tr.Ranks
}

// sizesOf returns the sizes of the files named *suffix in dir on every
// node: a framework's record names every rank's files.
func (r *traceRun) sizesOf(f *fz, dir, suffix string) map[string]int64 {
	sizes := map[string]int64{}
	dirs := r.dirs
	if len(dirs) == 0 {
		dirs = []string{f.dir}
	}
	for _, d := range dirs {
		maps.Copy(sizes, sizesOf(filepath.Join(d, filepath.FromSlash(dir)), suffix))
	}
	return sizes
}

func outOr(a []string, name string) string {
	if len(a) > 1 {
		return a[1]
	}
	return path.Join(a[0], name)
}

func writeMade(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// sizesOf returns the sizes of the files named *suffix in dir.
func sizesOf(dir, suffix string) map[string]int64 {
	sizes := map[string]int64{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
				sizes[e.Name()] = fi.Size()
			}
		}
	}
	return sizes
}

// hfIndex is a safetensors index naming each shard (one tensor each).
func hfIndex(shards map[string]int64) []byte {
	wm := map[string]string{}
	var total int64
	for name, size := range shards {
		wm["w."+name] = name
		total += size
	}
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm})
	return data
}
