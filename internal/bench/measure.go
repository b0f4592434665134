package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sample is one measured run of one tool.
type sample struct {
	Set    string `json:"set"` // the data set: bigSet or smallSet
	Tool   string `json:"tool"`
	Phase  string `json:"phase"`
	Round  int    `json:"round"` // 0-based; warm-ups have Warmup set
	Warmup bool   `json:"warmup,omitempty"`
	Bytes  int64  `json:"bytes"`
	// WallS is the child's wall time; UserS and SysS its CPU, including
	// every descendant it waited for (wait4 rusage).
	WallS float64 `json:"wall_s"`
	UserS float64 `json:"user_s"`
	SysS  float64 `json:"sys_s"`
	// MaxRSSMiB is the largest resident set of the child or any waited-for
	// descendant.
	MaxRSSMiB float64 `json:"max_rss_mib"`
	// ServerCPUS is the server's user+system CPU during the run.
	ServerCPUS float64 `json:"server_cpu_s"`
	// LinkCPUS is toxiproxy's CPU during the run (-wan), 0 without it.
	LinkCPUS float64 `json:"link_cpu_s,omitempty"`
	// SyncS is how long a sync(2) right after the run took: the writeback
	// the tool left in the page cache. ferry restore fsyncs every file
	// before it returns; the peers do not, so their wall time alone leaves
	// out the disk writes.
	SyncS float64 `json:"sync_after_s"`
	// ReadyS (restores) is the wall time plus the time it then took to read
	// every restored file once, before the sync: a restore started with a
	// cold page cache until every restored byte has been read.
	ReadyS float64 `json:"ready_s,omitempty"`
}

// cpuPerGiB is the client's CPU seconds per GiB moved.
func (s sample) cpuPerGiB() float64 {
	return (s.UserS + s.SysS) / (float64(s.Bytes) / (1 << 30))
}

// child is a command to measure.
type child struct {
	argv []string
	env  []string
	dir  string
}

func (c child) String() string { return strings.Join(c.argv, " ") }

// timeBin is GNU time, which reports the peak RSS of the command it runs.
// The rusage Go gets from wait4 cannot be used for that: Go starts children
// with vfork semantics, and Linux records the parent's peak RSS in the
// child's ru_maxrss at exec, so every child would report at least the
// harness's own peak. GNU time forks from a 2 MiB process instead.
const timeBin = "/usr/bin/time"

// measure runs c to completion and returns its wall time, rusage and the
// CPU srv spent meanwhile (srv may be nil). after, when not nil, runs as
// soon as c has exited successfully, before the sync that times the
// writeback; ReadyS is the wall time plus what after returns. A failing
// command is an error carrying the end of its output.
func measure(ctx context.Context, c child, srv *server, after func() (time.Duration, error)) (sample, error) {
	rssFile, err := os.CreateTemp("", "ferry-bench-rss-")
	if err != nil {
		return sample{}, err
	}
	rssFile.Close()
	defer os.Remove(rssFile.Name())
	argv := append([]string{timeBin, "-f", "%M", "-o", rssFile.Name(), "--"}, c.argv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = c.env, c.dir
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var before, linkBefore float64
	if srv != nil {
		before, linkBefore = srv.cpu(), srv.proxyCPU()
	}
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	var s sample
	if srv != nil {
		s.ServerCPUS, s.LinkCPUS = srv.cpu()-before, srv.proxyCPU()-linkBefore
	}
	var afterErr error
	if err == nil && after != nil {
		var d time.Duration
		d, afterErr = after()
		s.ReadyS = (wall + d).Seconds()
	}
	syncStart := time.Now()
	syscall.Sync()
	syncS := time.Since(syncStart).Seconds()
	if err != nil {
		return s, fmt.Errorf("%s: %v\n%s", c, err, out.String())
	}
	if afterErr != nil {
		return s, fmt.Errorf("%s: after it exited: %w", c, afterErr)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return s, fmt.Errorf("%s: no rusage", c)
	}
	s.WallS, s.SyncS = wall.Seconds(), syncS
	s.UserS = tvSeconds(ru.Utime)
	s.SysS = tvSeconds(ru.Stime)
	// CPU comes from our wait4, which includes GNU time and everything it
	// waited for; the peak RSS is the one GNU time got from its wait4.
	if s.MaxRSSMiB, err = readMaxRSS(rssFile.Name()); err != nil {
		return s, fmt.Errorf("%s: %w", c, err)
	}
	return s, nil
}

// readMaxRSS reads the peak RSS GNU time wrote (KiB) and returns it in MiB.
func readMaxRSS(path string) (float64, error) {
	rss, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read peak RSS: %w", err)
	}
	kib, err := strconv.ParseFloat(strings.TrimSpace(string(rss)), 64)
	if err != nil {
		return 0, fmt.Errorf("GNU time printed %q: %w", rss, err)
	}
	return kib / 1024, nil
}

func tvSeconds(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}

// tailBuffer keeps the last 16 KiB a command printed, for error messages.
type tailBuffer struct{ b bytes.Buffer }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b.Write(p)
	if t.b.Len() > 32<<10 {
		keep := append([]byte(nil), t.b.Bytes()[t.b.Len()-16<<10:]...)
		t.b.Reset()
		t.b.Write(keep)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return t.b.String() }

// settle flushes dirty pages left by the previous run, so that their
// writeback is charged to nobody's wall time, and pauses briefly.
func settle() {
	syscall.Sync()
	time.Sleep(time.Second)
}

// baseEnv is the environment every tool gets: PATH, a private HOME (no
// ~/.aws of the user is read) and the server's credentials.
func baseEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"LANG=C.UTF-8",
		"AWS_ACCESS_KEY_ID=" + accessKey,
		"AWS_SECRET_ACCESS_KEY=" + secretKey,
		"AWS_REGION=" + region,
		"AWS_DEFAULT_REGION=" + region,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}
