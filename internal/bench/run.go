package bench

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/wanlink"
)

// bench holds one run of the harness.
type bench struct {
	cfg  Config
	work string
	srv  *server
	ts   *toolset
	sets []*dataset // of the comparison: the big-file set first
	rep  *report
	// dropFailed is set once the page cache could not be dropped.
	dropFailed bool
}

// Run runs every phase cfg asks for and writes bench.md and bench.json to
// its output folder.
func Run(ctx context.Context, cfg Config) (err error) {
	log.SetFlags(log.Ltime)
	if err := checkBinaries(cfg); err != nil {
		return err
	}
	work, err := workDir(cfg)
	if err != nil {
		return err
	}
	if !cfg.keepWork {
		defer os.RemoveAll(work)
	}
	if err := os.MkdirAll(cfg.outDir, 0o755); err != nil {
		return err
	}
	b := &bench{cfg: cfg, work: work, rep: newReport(cfg)}
	b.sets = b.datasets()
	if err := b.checkFree(); err != nil {
		return err
	}
	stop, err := b.serve()
	if err != nil {
		return err
	}
	defer stop()
	if b.ts, err = newToolset(cfg, b.srv, work); err != nil {
		return err
	}
	b.rep.describeTools(b.ts, cfg.tools)

	if err := b.comparison(ctx); err != nil {
		return err
	}
	if err := b.ferryPhases(ctx); err != nil {
		return err
	}
	// A failed peers phase (a node's restore, or its files) fails the run
	// once the report of the rest is written.
	var peersErr error
	if cfg.has("peers") {
		if peersErr = b.peersPhase(ctx); peersErr != nil {
			peersErr = fmt.Errorf("peers: %w", peersErr)
			b.rep.note("%v", peersErr)
		}
	}
	b.rep.finish()
	if err := b.rep.write(cfg.outDir); err != nil {
		return err
	}
	return peersErr
}

// workDir returns the scratch folder: -work, made if missing, else a new
// temporary one.
func workDir(cfg Config) (string, error) {
	if cfg.workDir == "" {
		return os.MkdirTemp("", "ferry-bench-")
	}
	return cfg.workDir, os.MkdirAll(cfg.workDir, 0o755)
}

// checkFree fails when the scratch folder's disk cannot hold the data
// sets, their copies on the server (two restore sources and one upload at
// a time), one restore directory, and 10% slack.
func (b *bench) checkFree() error {
	var need int64
	for _, ds := range b.sets {
		need += ds.bytes() * 5 * 11 / 10
	}
	if free, err := freeBytes(b.work); err == nil && free < need {
		return fmt.Errorf("%s has %.1f GiB free; the comparison needs about %.1f GiB", b.work, gib(free), gib(need))
	}
	return nil
}

// serve starts versitygw in the scratch folder, and toxiproxy in
// front of it with -wan, and returns the function that stops them.
func (b *bench) serve() (stop func(), err error) {
	cfg := b.cfg
	accessLog := ""
	if cfg.has("peers") {
		// The peers phase counts the server's GETs in its access log.
		accessLog = filepath.Join(b.work, "s3-access.log")
	}
	b.srv, err = startServer(cfg.versitygw, filepath.Join(b.work, "s3"), cfg.tls, accessLog)
	if err != nil {
		return nil, err
	}
	log.Printf("versitygw on %s, scratch in %s", b.srv.endpoint, b.work)
	if cfg.wan == nil {
		return b.srv.stop, nil
	}
	scheme, host, _ := strings.Cut(b.srv.endpoint, "://")
	tp, err := wanlink.Start(cfg.toxiproxy, host, *cfg.wan)
	if err != nil {
		b.srv.stop()
		return nil, err
	}
	b.srv.endpoint, b.srv.proxyPid = scheme+"://"+tp.Addr, tp.Pid()
	log.Printf("every tool reaches the server through toxiproxy on %s: %s", tp.Addr, cfg.wan)
	b.rep.note("link: every tool and the agent reached the server through toxiproxy: %s", cfg.wan)
	return func() {
		tp.Stop()
		b.srv.stop()
	}, nil
}

// comparison runs the tools' comparison (upload and restore of each data
// set), its request counts and perf profiles, then frees its disk.
func (b *bench) comparison(ctx context.Context) error {
	if err := b.compare(ctx); err != nil {
		return err
	}
	if phases := countPhases(b.cfg); len(phases) > 0 {
		if err := b.countRequests(ctx, phases); err != nil {
			b.rep.note("request counts failed: %v", err)
		}
	}
	if b.cfg.perfProfile && len(b.sets) > 0 {
		if err := b.profile(ctx); err != nil {
			b.rep.note("perf profile failed: %v", err)
		}
	}
	// Free the comparison's disk before the large single files.
	for _, ds := range b.sets {
		b.removeSources(ds)
		_ = os.RemoveAll(ds.dir)
	}
	return nil
}

// ferryPhases runs the phases that measure ferry alone: push's peak RSS,
// BLAKE3 against b3sum, the agent, time to durable and interference with a
// trainer. The last three note their failure in the report and go on.
func (b *bench) ferryPhases(ctx context.Context) error {
	cfg := b.cfg
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
	if cfg.has("durable") {
		if err := b.durablePhase(ctx); err != nil {
			b.rep.note("durable: %v", err)
		}
	}
	if cfg.has("interference") {
		if err := b.interferencePhase(ctx); err != nil {
			b.rep.note("interference: %v", err)
		}
	}
	return nil
}

// datasets lists the data sets the upload and restore phases move (none
// when neither phase runs): the big files, then the small ones if -small
// asks for them.
func (b *bench) datasets() []*dataset {
	if !b.cfg.has("upload") && !b.cfg.has("restore") {
		return nil
	}
	sets := []*dataset{{name: bigSet, dir: filepath.Join(b.work, "data"), rel: bigNames(b.cfg.files), size: b.cfg.size}}
	if b.cfg.smallFiles > 0 {
		sets = append(sets, &dataset{name: smallSet, dir: filepath.Join(b.work, "data-small"),
			rel: smallNames(b.cfg.smallFiles, smallFolders), size: b.cfg.smallSize, folders: smallFolders})
	}
	return sets
}

// compare generates the data sets and runs the upload comparison on each,
// then the disk floor and the restore comparison on each. The restore
// sources of the big set stay for the request counts and profiles.
func (b *bench) compare(ctx context.Context) error {
	for i, ds := range b.sets {
		start := time.Now()
		log.Printf("generating the %s set: %d x %s of random bytes in %s", ds.name, len(ds.rel), fmtSize(ds.size), ds.dir)
		if err := makeDataset(ds, 1+uint64(i)<<32); err != nil {
			return fmt.Errorf("generate the %s data set: %w", ds.name, err)
		}
		log.Printf("%s set ready in %s", ds.name, time.Since(start).Round(time.Second))
		b.rep.Sets = append(b.rep.Sets, ds.info())
	}
	if b.cfg.has("upload") {
		for _, ds := range b.sets {
			if err := b.comparePhase(ctx, ds, "upload"); err != nil {
				return err
			}
		}
	}
	if !b.cfg.has("restore") {
		return nil
	}
	if err := b.diskPhase(ctx); err != nil {
		return err
	}
	for _, ds := range b.sets {
		if err := b.prepareRestoreSources(ctx, ds); err != nil {
			return err
		}
		if err := b.comparePhase(ctx, ds, "restore"); err != nil {
			return err
		}
		if ds.name != bigSet {
			b.removeSources(ds)
		}
	}
	return nil
}

func checkBinaries(cfg Config) error {
	need := map[string]string{"ferry": cfg.ferry, "versitygw": cfg.versitygw, "GNU time (Debian: time)": timeBin}
	if cfg.wan != nil {
		need["toxiproxy"] = cfg.toxiproxy
	}
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
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	default:
		return fmt.Sprintf("%dB", n)
	}
}

// countPhases lists the compared phases whose request counts are taken.
func countPhases(cfg Config) []string {
	var out []string
	for _, p := range []string{"upload", "restore"} {
		if cfg.has(p) {
			out = append(out, p)
		}
	}
	return out
}
