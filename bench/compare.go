package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
)

// comparePhase runs every tool through one phase in alternation: warm-up
// rounds first (not counted), then measured rounds, the tool order rotating
// each round so that no tool always follows the same one. Each run writes
// to a fresh prefix or directory, removed after it is checked.
func (b *bench) comparePhase(ctx context.Context, phase string) error {
	tools := b.cfg.tools
	for r := -b.cfg.warmup; r < b.cfg.rounds; r++ {
		for i := range tools {
			name := tools[(i+r+b.cfg.warmup)%len(tools)]
			t := b.ts.get(name)
			s, err := b.runOnce(ctx, phase, t, r)
			if err != nil {
				return err
			}
			s.Tool, s.Phase, s.Round, s.Warmup = name, phase, max(r, 0), r < 0
			s.Bytes = b.dataBytes
			b.rep.Samples = append(b.rep.Samples, s)
			tag := "round " + fmt.Sprint(r+1)
			if r < 0 {
				tag = "warm-up"
			}
			log.Printf("%-7s %-6s %-8s %6.2f s  %7.1f MiB/s  sync %5.2f s  cpu %5.2f s/GiB  rss %6.1f MiB  server %5.2f s",
				phase, name, tag, s.WallS, float64(s.Bytes)/(1<<20)/s.WallS, s.SyncS, s.cpuPerGiB(), s.MaxRSSMiB, s.ServerCPUS)
		}
	}
	return nil
}

// runOnce measures one run and checks its result. The first run of each
// tool (r == first round) compares restored bytes in full; others check
// names and sizes.
func (b *bench) runOnce(ctx context.Context, phase string, t tool, r int) (sample, error) {
	full := r == -b.cfg.warmup
	switch phase {
	case "upload":
		prefix := fmt.Sprintf("up-%s-%d", t.name, r+b.cfg.warmup)
		settle()
		s, err := measure(ctx, t.upload(b.dataDir, prefix), b.srv)
		if err != nil {
			return s, err
		}
		if err := b.checkUploaded(prefix); err != nil {
			return s, fmt.Errorf("%s upload: %w", t.name, err)
		}
		return s, b.srv.removePrefix(prefix)
	case "restore":
		dir := filepath.Join(b.work, "restore", fmt.Sprintf("%s-%d", t.name, r+b.cfg.warmup))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return sample{}, err
		}
		settle()
		s, err := measure(ctx, t.restore(t.restoreSource, dir), b.srv)
		if err != nil {
			return s, err
		}
		if err := b.checkRestored(dir, full); err != nil {
			return s, fmt.Errorf("%s restore: %w", t.name, err)
		}
		return s, os.RemoveAll(dir)
	}
	return sample{}, fmt.Errorf("unknown phase %q", phase)
}

// prepareRestoreSources uploads the data set once for each kind of restore
// source (ferry's manifest layout, plain objects for the peers); these
// uploads are not measured.
func (b *bench) prepareRestoreSources(ctx context.Context) error {
	done := map[string]bool{}
	for _, name := range b.cfg.tools {
		t := b.ts.get(name)
		if done[t.restoreSource] {
			continue
		}
		done[t.restoreSource] = true
		up := t
		if t.restoreSource == "src-plain" {
			// Any peer's upload makes plain objects; s5cmd is quickest.
			up = b.ts.get("s5cmd")
			if !b.toolWanted("s5cmd") {
				up = t
			}
		}
		log.Printf("preparing restore source %s with %s", t.restoreSource, up.name)
		if _, err := measure(ctx, up.upload(b.dataDir, t.restoreSource), nil); err != nil {
			return err
		}
		if err := b.checkUploaded(t.restoreSource); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) toolWanted(name string) bool {
	for _, t := range b.cfg.tools {
		if t == name {
			return true
		}
	}
	return false
}

// checkUploaded checks that the server holds an object of the right size
// for every file of the data set under prefix.
func (b *bench) checkUploaded(prefix string) error {
	objs, err := b.srv.objectSizes(prefix)
	if err != nil {
		return err
	}
	for _, p := range b.dataFiles {
		name := filepath.Base(p)
		found := false
		for key, size := range objs {
			if (key == name || strings.HasSuffix(key, "/"+name)) && size == b.cfg.size {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("no object of %d bytes for %s under %s (server holds %d objects)", b.cfg.size, name, prefix, len(objs))
		}
	}
	return nil
}

// checkRestored checks that dir holds every file of the data set with its
// size and, when full is set, the same bytes.
func (b *bench) checkRestored(dir string, full bool) error {
	for _, src := range b.dataFiles {
		dst := filepath.Join(dir, filepath.Base(src))
		fi, err := os.Stat(dst)
		if err != nil {
			return err
		}
		if fi.Size() != b.cfg.size {
			return fmt.Errorf("%s: %d bytes, want %d", dst, fi.Size(), b.cfg.size)
		}
		if full {
			if err := sameBytes(src, dst); err != nil {
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
