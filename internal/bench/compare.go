package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/manifest"
)

// comparePhase runs every tool through one phase on data set ds in
// alternation: warm-up rounds first (not counted), then measured rounds,
// the tool order rotating each round so that no tool always follows the
// same one. Each run writes to a fresh prefix or directory, removed after
// it is checked.
func (b *bench) comparePhase(ctx context.Context, ds *dataset, phase string) error {
	tools := b.cfg.tools
	for r := -b.cfg.warmup; r < b.cfg.rounds; r++ {
		for i := range tools {
			name := tools[(i+r+b.cfg.warmup)%len(tools)]
			s, err := b.runOnce(ctx, ds, phase, b.ts.get(name), r)
			if err != nil {
				return fmt.Errorf("%s set, %s %s: %w", ds.name, phase, name, err)
			}
			s.Set, s.Tool, s.Phase, s.Round, s.Warmup = ds.name, name, phase, max(r, 0), r < 0
			s.Bytes = ds.bytes()
			b.rep.Samples = append(b.rep.Samples, s)
			logSample(s, r)
		}
	}
	return nil
}

// logSample prints one run: round r, negative for a warm-up.
func logSample(s sample, r int) {
	tag := "round " + fmt.Sprint(r+1)
	if r < 0 {
		tag = "warm-up"
	}
	ready := ""
	if s.ReadyS > 0 {
		ready = fmt.Sprintf("  ready %6.2f s", s.ReadyS)
	}
	log.Printf("%-5s %-7s %-6s %-8s %6.2f s%s  %7.1f MiB/s  sync %5.2f s  cpu %5.2f s/GiB  rss %6.1f MiB  server %5.2f s",
		s.Set, s.Phase, s.Tool, tag, s.WallS, ready, float64(s.Bytes)/(1<<20)/s.WallS, s.SyncS, s.cpuPerGiB(), s.MaxRSSMiB, s.ServerCPUS)
}

// runOnce measures one run of t on ds and checks its result. The first run
// of each tool (r == first round) compares restored bytes in full; others
// check names and sizes.
func (b *bench) runOnce(ctx context.Context, ds *dataset, phase string, t tool, r int) (sample, error) {
	switch phase {
	case "upload":
		return b.uploadOnce(ctx, ds, t, r)
	case "restore":
		return b.restoreOnce(ctx, ds, t, r)
	}
	return sample{}, fmt.Errorf("unknown phase %q", phase)
}

// runName names run r of t on ds, for its prefix or directory.
func runName(ds *dataset, t tool, r int) string {
	return fmt.Sprintf("%s-%s-%d", ds.name, t.name, r)
}

// uploadOnce measures one upload of ds by t into a fresh prefix, checks
// what the server holds and removes it.
func (b *bench) uploadOnce(ctx context.Context, ds *dataset, t tool, r int) (sample, error) {
	prefix := "up-" + runName(ds, t, r+b.cfg.warmup)
	settle()
	s, err := measure(ctx, t.upload(ds.dir, prefix), b.srv, nil)
	if err != nil {
		return s, err
	}
	if err := b.checkUploaded(ds, prefix); err != nil {
		return s, fmt.Errorf("check upload: %w", err)
	}
	return s, b.srv.removePrefix(prefix)
}

// restoreOnce measures one restore of ds by t into a fresh directory,
// started with the page cache dropped and followed at once by the ready
// read; then checks the files and removes them.
func (b *bench) restoreOnce(ctx context.Context, ds *dataset, t tool, r int) (sample, error) {
	dir := filepath.Join(b.work, "restore", runName(ds, t, r+b.cfg.warmup))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sample{}, fmt.Errorf("create restore directory: %w", err)
	}
	paths := ds.paths(dir)
	settle()
	b.coldStart()
	s, err := measure(ctx, t.restore(ds.source(t), dir), b.srv,
		func() (time.Duration, error) { return readFiles(ctx, paths) })
	if err != nil {
		return s, err
	}
	if err := b.checkRestored(ds, dir, r == -b.cfg.warmup); err != nil {
		return s, fmt.Errorf("check restore: %w", err)
	}
	return s, os.RemoveAll(dir)
}

// prepareRestoreSources uploads ds once for each kind of restore source
// (ferry's manifest layout, plain objects for the peers), under prefixes of
// its own (dataset.source); these uploads are not measured.
func (b *bench) prepareRestoreSources(ctx context.Context, ds *dataset) error {
	done := map[string]bool{}
	for _, name := range b.cfg.tools {
		t := b.ts.get(name)
		src := ds.source(t)
		if done[src] {
			continue
		}
		done[src] = true
		up := t
		if t.restoreSource == "src-plain" && b.toolWanted("s5cmd") {
			// Any peer's upload makes plain objects; s5cmd is quickest.
			up = b.ts.get("s5cmd")
		}
		log.Printf("preparing restore source %s with %s", src, up.name)
		if _, err := measure(ctx, up.upload(ds.dir, src), nil, nil); err != nil {
			return fmt.Errorf("prepare restore source %s: %w", src, err)
		}
		if err := b.checkUploaded(ds, src); err != nil {
			return fmt.Errorf("prepare restore source %s: %w", src, err)
		}
	}
	return nil
}

// removeSources deletes the restore sources of ds from the server.
func (b *bench) removeSources(ds *dataset) {
	for _, name := range b.cfg.tools {
		_ = b.srv.removePrefix(ds.source(b.ts.get(name)))
	}
}

func (b *bench) toolWanted(name string) bool {
	for _, t := range b.cfg.tools {
		if t == name {
			return true
		}
	}
	return false
}

// checkUploaded checks that the server holds, under prefix, an object of
// the right size for every file of ds: one whose key is the file's
// relative path or ends with "/" and that path (ferry puts its step and
// attempt in front), or a pack of the size ferry's manifest gives that
// holds the file.
func (b *bench) checkUploaded(ds *dataset, prefix string) error {
	objs, err := b.srv.objectSizes(prefix)
	if err != nil {
		return fmt.Errorf("list %s on the server: %w", prefix, err)
	}
	// Every key of the right size, and each of its tails after a "/".
	found := map[string]bool{}
	for key, size := range objs {
		for k, ok := key, size == ds.size; ok; _, k, ok = strings.Cut(k, "/") {
			found[k] = true
		}
	}
	if err := b.foundInPacks(objs, ds, prefix, found); err != nil {
		return err
	}
	for _, rel := range ds.rel {
		if !found[rel] {
			return fmt.Errorf("no object of %d bytes for %s under %s (server holds %d objects)", ds.size, rel, prefix, len(objs))
		}
	}
	return nil
}

// foundInPacks marks in found the files of ds that ferry's manifests under
// prefix place in packs the server holds with their recorded size.
func (b *bench) foundInPacks(objs map[string]int64, ds *dataset, prefix string, found map[string]bool) error {
	for key := range objs {
		if !strings.HasPrefix(key, "manifests/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(b.srv.dir, bucket, prefix, key))
		if err != nil {
			return err
		}
		m, err := manifest.DecodeBytes(data, prefix)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", key, err)
		}
		for _, f := range m.Files {
			if f.Packed() && f.Size == ds.size && objs[strings.TrimPrefix(f.Key, prefix+"/")] == f.PackSize {
				found[f.Path] = true
			}
		}
	}
	return nil
}

// checkRestored checks that dir holds every file of ds at its relative
// path with its size and, when full is set, the same bytes.
func (b *bench) checkRestored(ds *dataset, dir string, full bool) error {
	srcs := ds.paths(ds.dir)
	for i, dst := range ds.paths(dir) {
		fi, err := os.Stat(dst)
		if err != nil {
			return err
		}
		if fi.Size() != ds.size {
			return fmt.Errorf("%s: %d bytes, want %d", dst, fi.Size(), ds.size)
		}
		if full {
			if err := sameBytes(srcs[i], dst); err != nil {
				return err
			}
		}
	}
	return nil
}

func sameBytes(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 4<<20), make([]byte, 4<<20)
	for off := int64(0); ; {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("%s differs from %s near byte %d", b, a, off)
		}
		off += int64(na)
		if ea != nil {
			return nil
		}
	}
}
