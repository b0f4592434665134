package bench

import (
	"context"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/uploader"
)

// rssResult is ferry push or restore (Op) of one file of SizeBytes at
// default settings.
type rssResult struct {
	Op         string  `json:"op"`
	SizeBytes  int64   `json:"size_bytes"`
	WallS      float64 `json:"wall_s"`
	CPUPerGiB  float64 `json:"cpu_s_per_gib"`
	MaxRSSMiB  float64 `json:"max_rss_mib"`
	ServerCPUS float64 `json:"server_cpu_s"`
}

// rssPhase pushes and then restores single files of each -rss-sizes size,
// one at a time, and records ferry's peak RSS, which must not grow with the
// file.
func (b *bench) rssPhase(ctx context.Context) error {
	for _, size := range b.cfg.rssSizes {
		dir := filepath.Join(b.work, "rss", fmtSize(size))
		// The file (or its restored copy), the server's parts and its
		// assembled object, and slack.
		need := size*3 + 1<<30
		if free, err := freeBytes(b.work); err == nil && free < need {
			b.rep.note("rss: %s file skipped: %.1f GiB free, about %.1f GiB needed", fmtSize(size), gib(free), gib(need))
			continue
		}
		if err := b.rssOne(ctx, dir, size); err != nil {
			return err
		}
	}
	return nil
}

// rssOne measures the push of one file of size, then its restore into an
// empty directory (the source is deleted first, to leave room).
func (b *bench) rssOne(ctx context.Context, dir string, size int64) error {
	start := time.Now()
	log.Printf("rss: generating one %s file", fmtSize(size))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeRandomFile(filepath.Join(dir, "model.pt"), size, 99); err != nil {
		return err
	}
	log.Printf("rss: generated in %s; pushing", time.Since(start).Round(time.Second))
	prefix := "rss-" + fmtSize(size)
	t := b.ts.ferry()
	for _, op := range []string{"push", "restore"} {
		c := t.upload(dir, prefix)
		if op == "restore" {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			c = t.restore(prefix, dir)
		}
		settle()
		s, err := measure(ctx, c, b.srv, nil)
		if err != nil {
			return err
		}
		s.Bytes = size
		b.rep.RSS = append(b.rep.RSS, rssResult{Op: op, SizeBytes: size, WallS: s.WallS, CPUPerGiB: s.cpuPerGiB(), MaxRSSMiB: s.MaxRSSMiB, ServerCPUS: s.ServerCPUS})
		log.Printf("rss: %s %s in %.1f s, peak RSS %.1f MiB", op, fmtSize(size), s.WallS, s.MaxRSSMiB)
	}
	if err := b.srv.removePrefix(prefix); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// hashResult is one hasher over the same file in page cache.
type hashResult struct {
	Hasher  string  `json:"hasher"`
	Threads string  `json:"threads"`
	MiBps   float64 `json:"mib_per_s"`
	CPUS    float64 `json:"cpu_s,omitempty"`
}

// b3Size is the file hashed by the BLAKE3 comparison.
const b3Size = 1 << 30

// blake3Phase compares ferry's BLAKE3 (uploader.HashFile, the code push
// uses for an already committed step; the upload's hashing pass adds a
// CRC32C, see the Go benchmarks) with b3sum, single-threaded and with all
// cores, on one file in page cache. Each figure is the median of 3 runs.
func (b *bench) blake3Phase(ctx context.Context) error {
	dir := filepath.Join(b.work, "b3")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "file.bin")
	if err := writeRandomFile(path, b3Size, 7); err != nil {
		return err
	}
	if _, _, err := uploader.HashFile(ctx, path); err != nil { // warm the cache
		return err
	}
	var walls []float64
	for range 3 {
		start := time.Now()
		if _, _, err := uploader.HashFile(ctx, path); err != nil {
			return err
		}
		walls = append(walls, time.Since(start).Seconds())
	}
	b.rep.BLAKE3 = append(b.rep.BLAKE3, hashResult{Hasher: "ferry push (zeebo/blake3, uploader.HashFile)", Threads: "1", MiBps: mibps(b3Size, median(walls))})
	walls = walls[:0]
	for range 3 {
		start := time.Now()
		if err := treeHashFile(path); err != nil {
			return err
		}
		walls = append(walls, time.Since(start).Seconds())
	}
	b.rep.BLAKE3 = append(b.rep.BLAKE3, hashResult{Hasher: "ferry restore (internal/blake3tree)", Threads: "1", MiBps: mibps(b3Size, median(walls))})
	if b.cfg.skipB3 {
		return nil
	}
	if _, err := exec.LookPath(b.cfg.b3sum); err != nil {
		b.rep.note("blake3: b3sum not found at %s; only ferry measured", b.cfg.b3sum)
		return nil
	}
	b.rep.B3sumVersion = firstLine(b.cfg.b3sum, "--version")
	for _, threads := range []string{"1", ""} {
		argv := []string{b.cfg.b3sum}
		label := "all cores"
		if threads != "" {
			argv = append(argv, "--num-threads", threads)
			label = threads
		}
		argv = append(argv, path)
		var walls, cpus []float64
		for range 3 {
			s, err := measure(ctx, child{argv: argv}, nil, nil)
			if err != nil {
				return err
			}
			walls, cpus = append(walls, s.WallS), append(cpus, s.UserS+s.SysS)
		}
		b.rep.BLAKE3 = append(b.rep.BLAKE3, hashResult{Hasher: "b3sum", Threads: label, MiBps: mibps(b3Size, median(walls)), CPUS: median(cpus)})
	}
	for _, h := range b.rep.BLAKE3 {
		log.Printf("blake3: %-40s threads %-9s %8.0f MiB/s", h.Hasher, h.Threads, h.MiBps)
	}
	return nil
}

// treeHashFile hashes path as one blake3tree range in 1 MiB reads, as
// ferry restore hashes each range it downloads.
func treeHashFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := blake3tree.NewRange(0)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for {
		n, err := f.Read(buf)
		r.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	_, err = blake3tree.Sum([]blake3tree.Node{r.Node()})
	return err
}

func firstOf(out string, err error) string {
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return err.Error()
}

func mibps(n int64, s float64) float64 { return float64(n) / (1 << 20) / s }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
