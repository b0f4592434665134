package detect

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// layoutsDir holds one small realistic tree per layout.
const layoutsDir = "../../testdata/layouts"

// copyTree copies testdata/layouts/<name> into a fresh temporary folder and
// returns it. Files are dated an hour back, as if written before the test.
func copyTree(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join(layoutsDir, name)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	age(t, dst)
	return dst
}

// age dates every file below dir an hour back.
func age(t *testing.T, dir string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func write(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, dir, rel, target string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// describe renders a step compactly for comparison: files as "path" or
// "path@rank", links as "path -> target", generated files as
// "path = content".
func describe(s Step) []string {
	out := []string{fmt.Sprintf("step %s root %q", s.Name(), s.Root)}
	for _, f := range s.Files {
		if f.Rank != nil {
			out = append(out, f.RelPath+"@"+strconv.Itoa(*f.Rank))
		} else {
			out = append(out, f.RelPath)
		}
	}
	for _, l := range s.Symlinks {
		out = append(out, l.RelPath+" -> "+l.Target)
	}
	for _, g := range s.Generated {
		out = append(out, g.RelPath+" = "+string(g.Data))
	}
	return out
}

func describeAll(steps []Step) [][]string {
	out := make([][]string, len(steps))
	for i, s := range steps {
		out[i] = describe(s)
	}
	return out
}

func newWatcher(t *testing.T, opts Options) *Watcher {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t)
	}
	w, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// running is a Watcher.Run in the background with the events it sent.
type running struct {
	t      *testing.T
	events chan Event
	cancel context.CancelFunc
	wg     sync.WaitGroup
	err    error
}

// start runs w until the test ends (or stop is called).
func start(t *testing.T, w *Watcher) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, events: make(chan Event, 100), cancel: cancel}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.err = w.Run(ctx, r.events)
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	r.wg.Wait()
	if r.err != nil {
		r.t.Errorf("Run: %v", r.err)
	}
	r.err = nil
}

// waitTimeout bounds every wait for an event; generous, since a loaded CI
// machine may be slow, and a passing test never waits this long.
const waitTimeout = 20 * time.Second

// next returns the next event, failing the test if none comes in time.
func (r *running) next() Event {
	r.t.Helper()
	select {
	case ev := <-r.events:
		return ev
	case <-time.After(waitTimeout):
		r.t.Fatalf("no event within %v", waitTimeout)
		return Event{}
	}
}

// expect returns the next event and checks its kind and step number.
func (r *running) expect(kind EventKind, step int64) Event {
	r.t.Helper()
	ev := r.next()
	if ev.Kind != kind || ev.Step.Number != step {
		r.t.Fatalf("got %v step %d (err %v), want %v step %d", ev.Kind, ev.Step.Number, ev.Err, kind, step)
	}
	return ev
}
