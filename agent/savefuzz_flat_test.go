package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/manifest"
)

// The flat layout's trainers: no framework, so no marker. What the agent
// promises there (docs/agent.md, the flat row and "Detecting
// checkpoints"): a step is complete once nothing in it has a temporary
// name, no file is cut short by its own format (torch.save's zip without
// its end record), and its files have not changed for the settle window;
// a close never shortens that. So the trainer here keeps every pause
// inside a save shorter than the settle window (a longer one is, by the
// docs, the end of the save), and the job dies only in the middle of a
// torch.save file: a kill between two files, or in the middle of a file
// in a format without an end record, leaves a state that stays unchanged
// and is complete by those rules, which the docs say the agent cannot
// tell from a finished save (prefer torch.save's zip format). Cleanups
// delete whole steps: a step cut in part before its commit is, without a
// marker, the step as it now is.

// flatPattern is the fuzzer's --step-pattern: model-N.pt and optim-N.pt
// (torch.save), sometimes extra-N.bin (raw bytes) form step N.
const flatPattern = `^(?:model|optim|extra)-(\d+)\.(?:pt|bin)$`

var flatFuzzName = regexp.MustCompile(`^(?:model|optim|extra)-(\d+)\.(?:pt|bin)(?:\.tmp)?$`)

func flatFuzzLayout() fuzzLayout {
	return fuzzLayout{
		name: "flat", dir: func(int64) string { return "" },
		options: func(o *detect.Options) { o.Layout, o.StepPattern = "flat", flatPattern },
		save:    saveFlat, files: flatFiles, removeStep: removeFlat,
		cleanup: removeFlat,
	}
}

// flatFiles is step n's files in the root, temporary ones included (a
// killed writer's temporary file is part of what is on disk).
func flatFiles(f *fz, n int64) fileState {
	out := fileState{}
	entries, _ := os.ReadDir(f.dir)
	for _, e := range entries {
		if m := flatFuzzName.FindStringSubmatch(e.Name()); m != nil && m[1] == strconv.FormatInt(n, 10) {
			for k, v := range f.snapshot(e.Name()) {
				out[k] = v
			}
		}
	}
	return out
}

func removeFlat(f *fz, n int64) {
	for name := range flatFiles(f, n) {
		f.remove(name)
	}
}

// saveFlat writes step n's files one after another, each in place, through
// a temporary name and os.replace, or appended in chunks with the file
// closed and reopened between them.
func saveFlat(f *fz, n int64) {
	names := []string{fmt.Sprintf("model-%d.pt", n), fmt.Sprintf("optim-%d.pt", n)}
	if f.rng.Intn(3) == 0 {
		names = append(names, fmt.Sprintf("extra-%d.bin", n))
	}
	kill := f.flatKill(len(names))
	for i, name := range names {
		if i > 0 {
			f.sleep(f.gap())
		}
		f.flatFile(name, i == kill)
	}
	if !f.dead {
		f.completedState(strconv.FormatInt(n, 10), n, flatFiles(f, n))
	}
}

// flatKill turns a drawn kill (f.crashAt) into the index of the file
// (never a raw one: the last is extra-N.bin when there are three) the job
// dies in the middle of, or -1.
func (f *fz) flatKill(files int) int {
	if f.crashAt < 0 {
		return -1
	}
	f.crashAt = -1
	return f.rng.Intn(min(files, 2))
}

// flatFile writes one file of a flat step in one of the trainers' ways;
// killed, it leaves the file (or its temporary) cut short.
func (f *fz) flatFile(rel string, kill bool) {
	if f.dead {
		return
	}
	if kill {
		f.crashAt = f.ops + 1 // the next write
	}
	switch f.rng.Intn(3) {
	case 0:
		f.write(rel+".tmp", f.size(), 1+f.rng.Intn(3), time.Duration(f.rng.Intn(150))*time.Millisecond)
		f.rename(rel+".tmp", rel)
	case 1:
		f.writeReopen(rel)
	default:
		f.file(rel)
	}
	if !kill {
		f.crashAt = -1
	}
}

// writeReopen appends a file in chunks, closing and reopening it between
// them (a writer that flushes what it has), pauses shorter than the
// settle window; killed, it leaves a prefix.
func (f *fz) writeReopen(rel string) {
	crash := f.next()
	size := f.size()
	data := f.content(rel, size)
	f.markTorn(rel, crash)
	if crash {
		data = data[:f.rng.Intn(len(data))]
	}
	chunks := 2 + f.rng.Intn(3)
	f.note("  write %s reopened (%d bytes, %d chunks)", rel, len(data), chunks)
	_ = os.MkdirAll(filepath.Dir(f.abs(rel)), 0o755)
	for i := range chunks {
		flag := os.O_CREATE | os.O_WRONLY | os.O_APPEND
		if i == 0 {
			flag |= os.O_TRUNC
		} else {
			time.Sleep(time.Duration(f.rng.Intn(900)) * time.Millisecond)
		}
		fh, err := os.OpenFile(f.abs(rel), flag, 0o644)
		if err != nil {
			panic(err)
		}
		lo, hi := min(i*size/chunks, len(data)), min((i+1)*size/chunks, len(data))
		if i == chunks-1 {
			hi = len(data)
		}
		if _, err := fh.Write(data[lo:hi]); err != nil {
			panic(err)
		}
		if err := fh.Close(); err != nil {
			panic(err)
		}
	}
}

// flatCounterFuzzLayout: the flat layout without a pattern, each entry of
// the root its own counted step: a folder ckpt-N/ (sometimes written as
// tmp-PID/ and renamed when done) or a file weights-N.pt.
func flatCounterFuzzLayout() fuzzLayout {
	dir := func(n int64) string {
		if n%200 == 0 {
			return fmt.Sprintf("ckpt-%d", n)
		}
		return fmt.Sprintf("weights-%d.pt", n)
	}
	return fuzzLayout{
		name: "flat-counter", dir: dir,
		options: func(o *detect.Options) { o.Layout = "flat" },
		save:    saveFlatCounter,
		files: func(f *fz, n int64) fileState {
			s := fileState{}
			for _, p := range []string{dir(n), dir(n) + ".tmp"} {
				if f.exists(p) {
					for k, v := range f.snapshot(p) {
						s[k] = v
					}
				}
			}
			return s
		},
		cleanup: func(f *fz, n int64) { f.remove(dir(n)) },
		key:     dir,
		keyOf: func(m *manifest.Manifest) string {
			if len(m.Files) == 0 {
				return ""
			}
			first, _, _ := strings.Cut(m.Files[0].Path, "/")
			return first
		},
	}
}

func saveFlatCounter(f *fz, n int64) {
	if n%200 != 0 {
		kill := f.flatKill(1)
		f.flatFile(fmt.Sprintf("weights-%d.pt", n), kill == 0)
		if !f.dead {
			f.completedState(fmt.Sprintf("weights-%d.pt", n), n, f.snapshot(fmt.Sprintf("weights-%d.pt", n)))
		}
		return
	}
	dir := fmt.Sprintf("ckpt-%d", n)
	w := dir
	if !f.exists(dir) && f.rng.Intn(3) == 0 {
		w = fmt.Sprintf("tmp-%d", 1000+f.rng.Intn(9000))
	}
	kill := f.flatKill(2)
	for i, name := range []string{"model.pt", "optim.pt"} {
		if i > 0 {
			f.sleep(f.gap())
		}
		f.flatFile(w+"/"+name, i == kill)
	}
	if f.dead {
		return
	}
	f.text(w+"/meta.json", fmt.Sprintf(`{"step": %d, "nonce": %d}`, n, f.rng.Int63()))
	if w != dir {
		f.rename(w, dir)
	}
	f.completedState(dir, n, f.snapshot(dir))
}
