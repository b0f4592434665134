package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// bench holds one run of the harness.
type bench struct {
	cfg       config
	work      string
	srv       *server
	ts        *toolset
	dataDir   string
	dataFiles []string
	dataBytes int64
	rep       *report
}

func run(ctx context.Context, cfg config) (err error) {
	log.SetFlags(log.Ltime)
	if err := checkBinaries(cfg); err != nil {
		return err
	}
	work := cfg.workDir
	if work == "" {
		if work, err = os.MkdirTemp("", "ferry-bench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if !cfg.keepWork {
		defer os.RemoveAll(work)
	}
	if err := os.MkdirAll(cfg.outDir, 0o755); err != nil {
		return err
	}
	b := &bench{cfg: cfg, work: work, rep: newReport(cfg)}
	b.dataBytes = int64(cfg.files) * cfg.size

	// Data set, its copies on the server (two restore sources and one
	// upload at a time), one restore directory, and 10% slack.
	need := b.dataBytes * 5 * 11 / 10
	if free, err := freeBytes(work); err == nil && free < need {
		return fmt.Errorf("%s has %.1f GiB free; the comparison needs about %.1f GiB", work, gib(free), gib(need))
	}
	b.srv, err = startServer(cfg.versitygw, filepath.Join(work, "s3"))
	if err != nil {
		return err
	}
	defer b.srv.stop()
	log.Printf("versitygw on %s, scratch in %s", b.srv.endpoint, work)
	if b.ts, err = newToolset(cfg, b.srv, work); err != nil {
		return err
	}
	b.rep.describeTools(b.ts, cfg.tools)

	if cfg.has("upload") || cfg.has("restore") {
		b.dataDir = filepath.Join(work, "data")
		start := time.Now()
		log.Printf("generating %d x %s of random bytes in %s", cfg.files, fmtSize(cfg.size), b.dataDir)
		if b.dataFiles, err = makeDataset(b.dataDir, cfg.files, cfg.size, 1); err != nil {
			return fmt.Errorf("generate data set: %w", err)
		}
		log.Printf("data set ready in %s", time.Since(start).Round(time.Second))
	}
	if cfg.has("upload") {
		if err := b.comparePhase(ctx, "upload"); err != nil {
			return err
		}
	}
	if cfg.has("restore") {
		if err := b.diskPhase(ctx); err != nil {
			return err
		}
		if err := b.prepareRestoreSources(ctx); err != nil {
			return err
		}
		if err := b.comparePhase(ctx, "restore"); err != nil {
			return err
		}
	}
	if phases := countPhases(cfg); len(phases) > 0 {
		if err := b.countRequests(ctx, phases); err != nil {
			b.rep.note("request counts failed: %v", err)
		}
	}
	if cfg.perfProfile && b.dataDir != "" {
		if err := b.profile(ctx); err != nil {
			b.rep.note("perf profile failed: %v", err)
		}
	}
	// Free the comparison's disk before the large single files.
	_ = b.srv.removePrefix("src-ferry")
	_ = b.srv.removePrefix("src-plain")
	if b.dataDir != "" {
		_ = os.RemoveAll(b.dataDir)
	}
	if cfg.has("rss") && b.toolWanted("ferry") {
		if err := b.rssPhase(ctx); err != nil {
			return err
		}
	}
	if cfg.has("blake3") {
		if err := b.blake3Phase(ctx); err != nil {
			return err
		}
	}
	if cfg.has("agent") {
		b.agentPhase(ctx)
	}
	b.rep.finish()
	return b.rep.write(cfg.outDir)
}

func checkBinaries(cfg config) error {
	need := map[string]string{"ferry": cfg.ferry, "versitygw": cfg.versitygw, "GNU time (Debian: time)": timeBin}
	for _, t := range cfg.tools {
		switch t {
		case "aws":
			need["aws"] = cfg.aws
		case "s5cmd":
			need["s5cmd"] = cfg.s5cmd
		}
	}
	for name, p := range need {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%s not found at %s (make bench builds or installs it): %v", name, p, err)
		}
	}
	return nil
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// fmtSize prints a byte count as the largest whole binary unit.
func fmtSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return fmt.Sprintf("%dB", n)
	}
}

// countPhases lists the compared phases whose request counts are taken.
func countPhases(cfg config) []string {
	var out []string
	for _, p := range []string{"upload", "restore"} {
		if cfg.has(p) {
			out = append(out, p)
		}
	}
	return out
}
