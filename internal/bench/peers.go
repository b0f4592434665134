package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/wanlink"
	"github.com/ferrylabs/ferry/uploader"
)

// The peers phase: N nodes restore one step at once, each as its own
// `ferry restore` process into its own directory, alone (solo: every node
// fetches what it needs from the bucket) and together (`--peers`: each
// range from the bucket once between them, the rest from each other over
// loopback). Only the bucket is behind -wan's link; the peers talk
// directly.

// Cases of the peers phase.
const (
	peersWhole    = "whole"    // every node needs every file of the step
	peersDisjoint = "disjoint" // node i needs only rank i's files
)

// Modes of a peers-phase run.
const (
	modeSolo  = "solo"
	modePeers = "peers"
)

// peersCase is one step the nodes restore.
type peersCase struct {
	name   string
	prefix string
	ds     *dataset
	// ranked maps each file of a disjoint step to its rank.
	ranked map[string]int
	// hashes is the BLAKE3 of every pushed file, by relative path.
	hashes map[string]string
}

// need lists the files node i of n restores in case c.
func (c *peersCase) need(i int) []string {
	if c.ranked == nil {
		return c.ds.rel
	}
	var out []string
	for _, rel := range c.ds.rel {
		if c.ranked[rel] == i {
			out = append(out, rel)
		}
	}
	return out
}

// stepBytes is what n nodes need of c between them: each byte counted
// once.
func (c *peersCase) stepBytes(n int) int64 {
	if c.ranked == nil {
		return c.ds.bytes()
	}
	var total int64
	for i := range n {
		total += int64(len(c.need(i))) * c.ds.size
	}
	return total
}

// peersRun is one run: n nodes restoring case Case at once, alone or
// with --peers. Counts are summed over the nodes.
type peersRun struct {
	Case   string `json:"case"`
	Nodes  int    `json:"nodes"`
	Mode   string `json:"mode"`
	Round  int    `json:"round"`
	Warmup bool   `json:"warmup,omitempty"`
	// WallS runs from the start of the first node to the exit of the last
	// (a --peers node lingers while others still need its ranges).
	WallS float64 `json:"wall_s"`
	// NodeWallS is each node's process wall time; NodeRestoreS the
	// "seconds" its --json printed (the restore alone, without lingering).
	NodeWallS    []float64 `json:"node_wall_s"`
	NodeRestoreS []float64 `json:"node_restore_s"`
	// GETs and Requests are the S3 requests the nodes counted (--json's
	// "requests": GetObject, all operations).
	GETs     int64 `json:"client_get_requests"`
	Requests int64 `json:"client_requests"`
	// BucketBytes came from the bucket: peers.bucket_bytes with --peers,
	// bytes_downloaded alone.
	BucketBytes int64 `json:"bucket_bytes"`
	// PeerBytes came from other nodes, LocalBytes from a node's own spool,
	// ServedBytes went to other nodes (peers.*, --peers only).
	PeerBytes   int64 `json:"peer_bytes"`
	LocalBytes  int64 `json:"local_bytes"`
	ServedBytes int64 `json:"served_bytes"`
	Fallbacks   int64 `json:"fallbacks"`
	Dropped     int   `json:"dropped"`
	// MinJoined is the fewest peers any node restored with (n-1 when every
	// node found every other).
	MinJoined int `json:"min_joined,omitempty"`
	// The server's side: GetObject requests in versitygw's access log, and
	// the bytes it wrote to its sockets (wchar of /proc/PID/io less the
	// access log's growth: response bodies and headers).
	ServerGETs      int64   `json:"server_get_requests"`
	ServerRequests  int64   `json:"server_requests"`
	ServerSentBytes int64   `json:"server_sent_bytes"`
	ServerCPUS      float64 `json:"server_cpu_s"`
	LinkCPUS        float64 `json:"link_cpu_s,omitempty"`
	// ClientCPUS is user+sys of every node.
	ClientCPUS float64 `json:"client_cpu_s"`
}

// peersSummary is one mode of one row over the measured rounds: medians.
type peersSummary struct {
	Runs            int     `json:"runs"`
	WallS           float64 `json:"median_wall_s"`
	BucketBytes     float64 `json:"median_bucket_bytes"`
	PeerBytes       float64 `json:"median_peer_bytes"`
	GETs            float64 `json:"median_client_get_requests"`
	ServerGETs      float64 `json:"median_server_get_requests"`
	ServerSentBytes float64 `json:"median_server_sent_bytes"`
	ClientCPUS      float64 `json:"median_client_cpu_s"`
	ServerCPUS      float64 `json:"median_server_cpu_s"`
}

// peersRow is one case at one node count.
type peersRow struct {
	Case  string `json:"case"`
	Nodes int    `json:"nodes"`
	// StepBytes is what the nodes need between them, each byte once: the
	// whole step, or n ranks' files.
	StepBytes int64        `json:"step_bytes"`
	Solo      peersSummary `json:"solo"`
	Peers     peersSummary `json:"peers"`
	// Ratio is the peers' median wall over solo's.
	Ratio float64 `json:"peers_vs_solo_wall"`
}

type peersResult struct {
	Files    int   `json:"files"`
	FileSize int64 `json:"file_size_bytes"`
	// ServerCounts says whether versitygw's access log was read (the
	// server-side request counts).
	ServerCounts bool       `json:"server_counts"`
	Link         string     `json:"link,omitempty"`
	Runs         []peersRun `json:"runs"`
	Rows         []peersRow `json:"rows"`
}

// peersPhase pushes the two steps, then for each node count and case runs
// the nodes alone and with --peers, alternating (the order swapping every
// round), -warmup rounds first, and checks every node's files.
func (b *bench) peersPhase(ctx context.Context) error {
	maxNodes := 0
	for _, n := range b.cfg.peerNodes {
		maxNodes = max(maxNodes, n)
	}
	whole := &dataset{name: peersWhole, dir: filepath.Join(b.work, "peers-data", peersWhole), rel: bigNames(b.cfg.files), size: b.cfg.size}
	disjoint := &dataset{name: peersDisjoint, dir: filepath.Join(b.work, "peers-data", peersDisjoint), size: b.cfg.size}
	ranked := map[string]int{}
	for r := range maxNodes {
		for j := range b.cfg.files {
			rel := fmt.Sprintf("model-rank%d-shard%02d.pt", r, j)
			disjoint.rel = append(disjoint.rel, rel)
			ranked[rel] = r
		}
	}
	// The server's copies, the data while it is pushed (and the server's
	// parts beside it), every node's copy of its share (the whole step, or
	// its rank's files, as many bytes) and the spools; 10% slack.
	stepW, stepD := whole.bytes(), disjoint.bytes()
	need := (2*(stepW+stepD) + int64(maxNodes+1)*stepW) * 11 / 10
	if free, err := freeBytes(b.work); err == nil && free < need {
		return fmt.Errorf("%s has %.1f GiB free; the peers phase needs about %.1f GiB", b.work, gib(free), gib(need))
	}
	res := &peersResult{Files: b.cfg.files, FileSize: b.cfg.size, ServerCounts: b.srv.accessLog != ""}
	if b.cfg.wan != nil {
		res.Link = b.cfg.wan.String()
	}
	b.rep.Peers = res
	cases := []*peersCase{
		{name: peersWhole, prefix: "peers-" + peersWhole, ds: whole},
		{name: peersDisjoint, prefix: "peers-" + peersDisjoint, ds: disjoint, ranked: ranked},
	}
	for i, c := range cases {
		if err := b.pushPeersStep(ctx, c, 7+uint64(i)<<32); err != nil {
			return err
		}
		defer func() { _ = b.srv.removePrefix(c.prefix) }()
	}
	for _, n := range b.cfg.peerNodes {
		for _, c := range cases {
			row := peersRow{Case: c.name, Nodes: n, StepBytes: c.stepBytes(n)}
			modes := []string{modeSolo, modePeers}
			for r := -b.cfg.warmup; r < b.cfg.rounds; r++ {
				for k := range modes {
					mode := modes[(k+r+b.cfg.warmup)%len(modes)]
					run, err := b.peersOnce(ctx, c, n, mode)
					if err != nil {
						return fmt.Errorf("%s, %d nodes, %s: %w", c.name, n, mode, err)
					}
					run.Round, run.Warmup = max(r, 0), r < 0
					res.Runs = append(res.Runs, run)
					logPeersRun(run, row.StepBytes, r)
					if mode == modePeers && run.MinJoined < n-1 {
						b.rep.note("peers: %s, %d nodes, round %d: a node restored with %d of its %d peers", c.name, n, r+1, run.MinJoined, n-1)
					}
					if run.Fallbacks > 0 || run.Dropped > 0 {
						b.rep.note("peers: %s, %d nodes, round %d: %d ranges fetched from the bucket because their owner did not serve them, %d peers dropped", c.name, n, r+1, run.Fallbacks, run.Dropped)
					}
				}
			}
			row.Solo, row.Peers = summarizePeers(res.Runs, c.name, n, modeSolo), summarizePeers(res.Runs, c.name, n, modePeers)
			if row.Solo.WallS > 0 {
				row.Ratio = row.Peers.WallS / row.Solo.WallS
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return nil
}

// pushPeersStep generates c's files, pushes them as one ferry step to c's
// prefix (not measured), records their BLAKE3 and deletes them.
func (b *bench) pushPeersStep(ctx context.Context, c *peersCase, seed uint64) error {
	start := time.Now()
	log.Printf("peers: generating the %s step: %d x %s", c.name, len(c.ds.rel), fmtSize(c.ds.size))
	if err := makeDataset(c.ds, seed); err != nil {
		return fmt.Errorf("generate the %s step: %w", c.name, err)
	}
	defer os.RemoveAll(c.ds.dir)
	_ = b.srv.removePrefix(c.prefix)
	if _, err := measure(ctx, b.ts.ferry().upload(c.ds.dir, c.prefix), nil, nil); err != nil {
		return fmt.Errorf("push the %s step: %w", c.name, err)
	}
	if err := b.checkUploaded(c.ds, c.prefix); err != nil {
		return fmt.Errorf("push the %s step: %w", c.name, err)
	}
	hashes, err := hashFiles(ctx, c.ds.dir, c.ds.rel)
	if err != nil {
		return err
	}
	c.hashes = hashes
	log.Printf("peers: %s step pushed to s3://%s/%s in %s", c.name, bucket, c.prefix, time.Since(start).Round(time.Second))
	return nil
}

// hashFiles returns the BLAKE3 of each file rel under root, a few at once.
func hashFiles(ctx context.Context, root string, rel []string) (map[string]string, error) {
	out := make(map[string]string, len(rel))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(2, runtime.NumCPU()))
	for _, r := range rel {
		g.Go(func() error {
			h, _, err := uploader.HashFile(gctx, filepath.Join(root, filepath.FromSlash(r)))
			if err != nil {
				return err
			}
			mu.Lock()
			out[r] = h
			mu.Unlock()
			return nil
		})
	}
	return out, g.Wait()
}

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

func logPeersRun(run peersRun, step int64, r int) {
	tag := "round " + fmt.Sprint(r+1)
	if r < 0 {
		tag = "warm-up"
	}
	log.Printf("peers %-8s %d nodes %-5s %-8s %6.2f s  bucket %5.2fx step (server sent %5.2fx)  peers %5.2fx  GETs %d (server %d)  client CPU %.1f s  server CPU %.1f s",
		run.Case, run.Nodes, run.Mode, tag, run.WallS, float64(run.BucketBytes)/float64(step), float64(run.ServerSentBytes)/float64(step),
		float64(run.PeerBytes)/float64(step), run.GETs, run.ServerGETs, run.ClientCPUS, run.ServerCPUS)
}

// summarizePeers reduces the measured runs of one case, node count and
// mode to medians.
func summarizePeers(runs []peersRun, name string, n int, mode string) peersSummary {
	var wall, bucketB, peerB, gets, sgets, sent, ccpu, scpu []float64
	for _, r := range runs {
		if r.Case != name || r.Nodes != n || r.Mode != mode || r.Warmup {
			continue
		}
		wall, bucketB, peerB = append(wall, r.WallS), append(bucketB, float64(r.BucketBytes)), append(peerB, float64(r.PeerBytes))
		gets, sgets, sent = append(gets, float64(r.GETs)), append(sgets, float64(r.ServerGETs)), append(sent, float64(r.ServerSentBytes))
		ccpu, scpu = append(ccpu, r.ClientCPUS), append(scpu, r.ServerCPUS)
	}
	return peersSummary{Runs: len(wall), WallS: median(wall), BucketBytes: median(bucketB), PeerBytes: median(peerB),
		GETs: median(gets), ServerGETs: median(sgets), ServerSentBytes: median(sent), ClientCPUS: median(ccpu), ServerCPUS: median(scpu)}
}

// peersMarkdown renders the peers phase's table.
func (r *report) peersMarkdown(p func(string, ...any)) {
	res := r.Peers
	if res == nil || len(res.Rows) == 0 {
		return
	}
	link := "on loopback"
	if res.Link != "" {
		link = "through the link (" + res.Link + "); the peers talk over loopback directly"
	}
	p("## Restore with peers: N nodes at once, alone and with --peers\n\n")
	p("N `ferry restore` processes start at once, each into its own empty directory with the page cache dropped, reaching the bucket %s: "+
		"alone (solo), or with `--peers` (every node's 127.0.0.1:PORT, `--peer-rank i`). "+
		"Whole: every node restores the step of %d x %s. Disjoint: node i restores only rank i's %d x %s (`--ranks i`). "+
		"Wall: from the start to the last node's exit (a --peers node lingers while others need its ranges). "+
		"Bytes are summed over the nodes, as multiples of what the nodes need between them (the step, each byte once); "+
		"\"server\" is versitygw's side (bytes written to its sockets; GetObject lines in its access log). "+
		"Medians of %d rounds, solo and peers alternating; every node's files checked against the pushed BLAKE3.\n\n",
		link, res.Files, fmtSize(res.FileSize), res.Files, fmtSize(res.FileSize), r.Rounds)
	p("| case | nodes | step | solo wall s | peers wall s | peers / solo | from the bucket, solo | from the bucket, peers | between peers | GETs solo / peers |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range res.Rows {
		x := func(v float64) string { return fmt.Sprintf("%.2fx", v/float64(row.StepBytes)) }
		bucketCell := func(s peersSummary) string {
			if !res.ServerCounts && s.ServerSentBytes == 0 {
				return x(s.BucketBytes)
			}
			return fmt.Sprintf("%s (server %s)", x(s.BucketBytes), x(s.ServerSentBytes))
		}
		gets := fmt.Sprintf("%.0f / %.0f", row.Solo.GETs, row.Peers.GETs)
		if res.ServerCounts {
			gets += fmt.Sprintf(" (server %.0f / %.0f)", row.Solo.ServerGETs, row.Peers.ServerGETs)
		}
		p("| %s | %d | %s | %.2f | %.2f | %.2fx | %s | %s | %s | %s |\n", row.Case, row.Nodes, fmtBytesShort(row.StepBytes),
			row.Solo.WallS, row.Peers.WallS, row.Ratio, bucketCell(row.Solo), bucketCell(row.Peers), x(row.Peers.PeerBytes), gets)
	}
	p("\n")
}

// fmtBytesShort prints a byte count in MiB or GiB with one decimal where
// it is not whole.
func fmtBytesShort(n int64) string {
	if n%(1<<20) == 0 && n < 1<<30 || n%(1<<30) == 0 {
		return fmtSize(n)
	}
	return fmt.Sprintf("%.1fGiB", gib(n))
}

// sortedInts returns the distinct values of v in increasing order.
func sortedInts(v []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range v {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}
