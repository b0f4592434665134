package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/wanlink"
	"github.com/ferrylabs/ferry/uploader"
)

// restoreJSON is what `ferry restore --json` prints that the phase reads
// (restoreSummary in cmd/ferry).
type restoreJSON struct {
	Files           int              `json:"files"`
	Bytes           int64            `json:"bytes"`
	BytesDownloaded int64            `json:"bytes_downloaded"`
	Seconds         float64          `json:"seconds"`
	Requests        map[string]int64 `json:"requests"`
	Error           string           `json:"error"`
	Peers           *struct {
		Joined      int               `json:"joined"`
		BucketBytes int64             `json:"bucket_bytes"`
		PeerBytes   int64             `json:"peer_bytes"`
		LocalBytes  int64             `json:"local_bytes"`
		ServedBytes int64             `json:"served_bytes"`
		Fallbacks   int64             `json:"fallbacks"`
		Dropped     map[string]string `json:"dropped"`
	} `json:"peers"`
}

// peersOnce runs n nodes restoring c at once, alone or with --peers, each
// into a fresh directory after the page cache is dropped; then checks
// every node's files and removes them.
func (b *bench) peersOnce(ctx context.Context, c *peersCase, n int, mode string) (peersRun, error) {
	run := peersRun{Case: c.name, Nodes: n, Mode: mode}
	root := filepath.Join(b.work, "peers")
	if err := os.RemoveAll(root); err != nil {
		return run, err
	}
	var addrs []string
	if mode == modePeers {
		var err error
		if addrs, err = freeAddrs(n); err != nil {
			return run, err
		}
	}
	cmds, outs, errs, err := b.peersCommands(ctx, c, n, mode, root, addrs)
	if err != nil {
		return run, err
	}
	settle()
	b.coldStart()
	logBefore := fileSize(b.srv.accessLog)
	cpuBefore, linkBefore, wcharBefore := b.srv.cpu(), b.srv.proxyCPU(), procWchar(b.srv.pid())
	start := time.Now()
	ends := make([]time.Duration, n)
	var wg sync.WaitGroup
	runErrs := make([]error, n)
	for i, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			for _, started := range cmds[:i] {
				_ = started.Process.Kill()
				_ = started.Wait()
			}
			return run, fmt.Errorf("node %d: %w", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runErrs[i] = cmd.Wait()
			ends[i] = time.Since(start)
		}()
	}
	wg.Wait()
	run.WallS = time.Since(start).Seconds()
	run.ServerCPUS, run.LinkCPUS = b.srv.cpu()-cpuBefore, b.srv.proxyCPU()-linkBefore
	wchar := procWchar(b.srv.pid()) - wcharBefore
	if b.srv.accessLog != "" {
		// versitygw writes a request's line when it has answered it; give
		// the last ones a moment.
		time.Sleep(200 * time.Millisecond)
		gets, all, grown, err := countAccessLog(b.srv.accessLog, logBefore)
		if err != nil {
			return run, fmt.Errorf("read the server's access log: %w", err)
		}
		run.ServerGETs, run.ServerRequests, wchar = gets, all, wchar-grown
	}
	run.ServerSentBytes = wchar
	for i, cmd := range cmds {
		if runErrs[i] != nil {
			return run, fmt.Errorf("node %d: %s: %v\n%s%s", i, strings.Join(cmd.Args, " "), runErrs[i], outs[i].String(), errs[i].String())
		}
		var s restoreJSON
		if err := json.Unmarshal(outs[i].Bytes(), &s); err != nil {
			return run, fmt.Errorf("node %d: read --json: %w: %q", i, err, outs[i].String())
		}
		if err := run.add(i, s, cmd.ProcessState, ends[i]); err != nil {
			return run, err
		}
	}
	if err := b.checkPeersTrees(ctx, c, root, n); err != nil {
		return run, err
	}
	return run, os.RemoveAll(root)
}

// peersCommands builds the n restore commands of one run, each into its
// own folder below root, with --peers when mode says so.
func (b *bench) peersCommands(ctx context.Context, c *peersCase, n int, mode, root string, addrs []string) ([]*exec.Cmd, []*bytes.Buffer, []*tailBuffer, error) {
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	errs := make([]*tailBuffer, n)
	for i := range n {
		dir, state := filepath.Join(root, fmt.Sprintf("node-%d", i)), filepath.Join(root, fmt.Sprintf("state-%d", i))
		if err := os.MkdirAll(state, 0o755); err != nil {
			return nil, nil, nil, err
		}
		argv := []string{b.cfg.ferry, "restore", "--json", "--quiet", "--from", "s3://" + bucket + "/" + c.prefix, "--to", dir}
		if c.ranked != nil {
			argv = append(argv, "--ranks", fmt.Sprint(i))
		}
		if mode == modePeers {
			argv = append(argv, "--peers", strings.Join(addrs, ","), "--peer-rank", fmt.Sprint(i), "--peer-listen", addrs[i])
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(append([]string(nil), b.ts.env...), "S3_ENDPOINT_URL="+b.srv.endpoint, "FERRY_STATE_DIR="+state)
		outs[i], errs[i] = &bytes.Buffer{}, &tailBuffer{}
		cmd.Stdout, cmd.Stderr = outs[i], errs[i]
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmds[i] = cmd
	}
	return cmds, outs, errs, nil
}

// add counts node i's --json summary, process and wall into the run.
func (run *peersRun) add(i int, s restoreJSON, ps *os.ProcessState, end time.Duration) error {
	run.NodeWallS = append(run.NodeWallS, end.Seconds())
	run.NodeRestoreS = append(run.NodeRestoreS, s.Seconds)
	run.ClientCPUS += ps.UserTime().Seconds() + ps.SystemTime().Seconds()
	run.GETs += s.Requests["GetObject"]
	for _, v := range s.Requests {
		run.Requests += v
	}
	p := s.Peers
	if p == nil {
		if run.Mode == modePeers && run.Nodes > 1 {
			return fmt.Errorf("node %d: --json has no peers object", i)
		}
		run.BucketBytes += s.BytesDownloaded
		return nil
	}
	run.BucketBytes += p.BucketBytes
	run.PeerBytes += p.PeerBytes
	run.LocalBytes += p.LocalBytes
	run.ServedBytes += p.ServedBytes
	run.Fallbacks += p.Fallbacks
	run.Dropped += len(p.Dropped)
	if i == 0 || p.Joined < run.MinJoined {
		run.MinJoined = p.Joined
	}
	return nil
}

// checkPeersTrees checks that node i's directory holds exactly the files
// it needs, each with the BLAKE3 of the pushed file.
func (b *bench) checkPeersTrees(ctx context.Context, c *peersCase, root string, n int) error {
	type job struct{ path, rel string }
	var jobs []job
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("node-%d", i))
		want := map[string]bool{}
		for _, rel := range c.need(i) {
			want[rel] = true
		}
		got := map[string]bool{}
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			rel = filepath.ToSlash(rel)
			if !d.Type().IsRegular() || !want[rel] {
				return fmt.Errorf("node %d: %s is not a file of its share of the step", i, rel)
			}
			got[rel] = true
			jobs = append(jobs, job{p, rel})
			return nil
		})
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("node %d: restored %d of its %d files", i, len(got), len(want))
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(2, runtime.NumCPU()))
	for _, j := range jobs {
		g.Go(func() error {
			h, size, err := uploader.HashFile(gctx, j.path)
			if err != nil {
				return err
			}
			if size != c.ds.size || h != c.hashes[j.rel] {
				return fmt.Errorf("%s: %d bytes, BLAKE3 %s; pushed %d bytes, BLAKE3 %s", j.path, size, h, c.ds.size, c.hashes[j.rel])
			}
			return nil
		})
	}
	return g.Wait()
}

// freeAddrs returns n distinct free loopback addresses.
func freeAddrs(n int) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 10*n {
			return nil, fmt.Errorf("no %d distinct free ports on 127.0.0.1", n)
		}
		a, err := wanlink.FreeAddr()
		if err != nil {
			return nil, err
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// procWchar is the bytes pid has written with write(2) and the like
// (sockets included), 0 when it cannot be read.
func procWchar(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "wchar: "); ok {
			var n int64
			_, _ = fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

func fileSize(path string) int64 {
	if path == "" {
		return 0
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// countAccessLog counts the requests versitygw logged after byte off of
// its access log (one line each, the operation as "s3_GetObject"), and
// returns how many bytes the log grew by.
func countAccessLog(path string, off int64) (gets, all, grown int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	if _, err := f.Seek(off, 0); err != nil {
		return 0, 0, 0, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		grown += int64(len(line)) + 1
		for _, field := range strings.Fields(line) {
			if op, ok := strings.CutPrefix(field, "s3_"); ok {
				all++
				if op == "GetObject" {
					gets++
				}
				break
			}
		}
	}
	return gets, all, grown, sc.Err()
}
