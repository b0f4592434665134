package peer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var testKey = KeyFromToken("test-job")

// counted counts the bytes read from the bucket through it.
type counted struct {
	store.Store
	bytes atomic.Int64
	gets  atomic.Int64
}

func (c *counted) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := c.Store.Get(ctx, key, off, n)
	if err != nil || !strings.HasPrefix(key, "run/data/") {
		return rc, err
	}
	c.gets.Add(1)
	return readCloser{countReader{rc, &c.bytes}, rc}, nil
}

// step commits files of the given sizes as step 1, each an object of its
// own (peers share those; a push packs small files, whose packs restore
// reads from the bucket), and returns the bucket and the folder they came
// from.
func step(t *testing.T, sizes ...int) (store.Store, string) {
	t.Helper()
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	dir := t.TempDir()
	files := make([]uploader.File, len(sizes))
	for i, size := range sizes {
		b := make([]byte, size)
		_, _ = rand.Read(b)
		name := fmt.Sprintf("rank%d.pt", i)
		files[i] = uploader.File{LocalPath: filepath.Join(dir, name), RelPath: name, Key: manifest.DataKey("run", 1, "a", name)}
		if err := os.WriteFile(files[i].LocalPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := uploader.New(uploader.Options{Store: st}).Upload(t.Context(), files)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: 1, Created: time.Now().UTC(), Files: entries}
	if _, _, err := remote.Commit(t.Context(), st, "run", m); err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// freeAddrs opens n loopback listeners and returns their addresses; a
// node started with listen(t, addr) serves on the one for addr.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		listeners.Store(addr, ln)
		t.Cleanup(func() { ln.Close() })
		out = append(out, addr)
	}
	return out
}

// listeners holds the listeners freeAddrs opened, by address.
var listeners sync.Map

// listen returns the listener freeAddrs opened for addr: no other process
// can take the port in between.
func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, ok := listeners.LoadAndDelete(addr)
	if !ok {
		t.Fatalf("no listener for %s", addr)
	}
	return ln.(net.Listener)
}

// nodeRun is one node's cooperative restore.
type nodeRun struct {
	dir    string
	bucket *counted
	res    restore.Result
	err    error
	stats  Stats
}

// restoreTogether restores step 1 on every address of addrs that is not
// in skip, all at once, each a node of the others.
func restoreTogether(t *testing.T, st store.Store, addrs []string, skip map[int]bool, cfg Config) []*nodeRun {
	t.Helper()
	return restoreWith(t, st, addrs, skip, nil, cfg)
}

// restoreWith is restoreTogether with the target directories of some nodes
// already holding the files of the folder dirs gives them.
func restoreWith(t *testing.T, st store.Store, addrs []string, skip map[int]bool, dirs map[int]string, cfg Config) []*nodeRun {
	t.Helper()
	return restoreSelected(t, st, addrs, skip, dirs, nil, cfg)
}

// restoreSelected is restoreWith with node i restoring only the files
// paths[i] selects (all when nil).
func restoreSelected(t *testing.T, st store.Store, addrs []string, skip map[int]bool, dirs map[int]string, paths map[int]*restore.PathFilter, cfg Config) []*nodeRun {
	t.Helper()
	runs := make([]*nodeRun, len(addrs))
	var wg sync.WaitGroup
	for i := range addrs {
		if skip[i] {
			if ln, ok := listeners.LoadAndDelete(addrs[i]); ok {
				ln.(net.Listener).Close() // never started: nothing listens there
			}
			continue
		}
		r := &nodeRun{dir: t.TempDir(), bucket: &counted{Store: st}}
		if src, ok := dirs[i]; ok {
			copyTree(t, src, r.dir)
		}
		runs[i] = r
		c := cfg
		c.Bucket, c.Key, c.Listener, c.Peers, c.Self, c.SpoolDir = r.bucket, testKey, listen(t, addrs[i]), addrs, i, r.dir
		n, err := Start(c)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer n.Close()
			start := time.Now()
			defer func() { t.Logf("node %d: %s", i, time.Since(start)) }()
			r.res, r.err = restore.Restore(t.Context(), restore.Options{Store: r.bucket, Prefix: "run", Dir: r.dir, Step: 1,
				ChunkSize: 1 << 20, Peers: n.Join, Paths: paths[i]})
			t.Logf("node %d restored in %s", i, time.Since(start))
			n.Finish(t.Context())
			r.stats = n.Stats()
		})
	}
	wg.Wait()
	return runs
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	ents, _ := os.ReadDir(from)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(to, e.Name()), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func sameTree(t *testing.T, want, got string) {
	t.Helper()
	ents, _ := os.ReadDir(want)
	for _, e := range ents {
		a, _ := os.ReadFile(filepath.Join(want, e.Name()))
		b, err := os.ReadFile(filepath.Join(got, e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s restored in %s differs from what was pushed (%v)", e.Name(), got, err)
		}
	}
}

// Three nodes restoring the same step together read each byte from the
// bucket once between them, and each restores every file byte for byte.
// The same over TLS.
func TestEachByteFromTheBucketOnce(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprint("tls=", tls), func(t *testing.T) { eachByteOnce(t, tls) })
	}
}

func eachByteOnce(t *testing.T, tls bool) {
	sizes := []int{5<<20 + 3, 3 << 20, 1 << 20, 700, 0, 2<<20 + 1}
	st, src := step(t, sizes...)
	var total int64
	for _, s := range sizes {
		total += int64(s)
	}
	addrs := freeAddrs(t, 3)
	runs := restoreTogether(t, st, addrs, nil, Config{TLS: tls})
	var bucket, peers int64
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		sameTree(t, src, r.dir)
		if r.stats.Joined != 2 || len(r.stats.Dropped) != 0 || r.stats.Fallbacks != 0 {
			t.Fatalf("node %d: %+v, want both peers joined and used", i, r.stats)
		}
		if got := r.bucket.bytes.Load(); got != r.stats.BucketBytes {
			t.Fatalf("node %d read %d bytes from the bucket, its stats say %d", i, got, r.stats.BucketBytes)
		}
		bucket += r.bucket.bytes.Load()
		peers += r.stats.PeerBytes
	}
	if bucket != total {
		t.Fatalf("the nodes read %d bytes from the bucket, the step has %d", bucket, total)
	}
	if peers != 2*total {
		t.Fatalf("the nodes got %d bytes from each other, want %d", peers, 2*total)
	}
}

// A node of a restarted job that still holds the step (a survivor) keeps
// its files and serves them: the replaced nodes read nothing from the
// bucket.
func TestSurvivorServesWhatItHolds(t *testing.T) {
	st, src := step(t, 3<<20+11, 2<<20, 500)
	addrs := freeAddrs(t, 3)
	runs := restoreWith(t, st, addrs, nil, map[int]string{0: src}, Config{})
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		sameTree(t, src, r.dir)
		if got := r.bucket.bytes.Load(); got != 0 {
			t.Fatalf("node %d read %d bytes from the bucket, want none: %+v", i, got, r.stats)
		}
	}
	if runs[0].res.Kept != 3 || runs[0].stats.ServedBytes != 2*(5<<20+511) {
		t.Fatalf("survivor: kept %d, served %d bytes", runs[0].res.Kept, runs[0].stats.ServedBytes)
	}
}

// A survivor whose copy of a file is wrong (same size, other bytes) serves
// it until it has fetched the file again itself; whoever got the wrong
// bytes catches them and fetches that file from the bucket.
func TestSurvivorWithAWrongCopy(t *testing.T) {
	st, src := step(t, 3<<20+11, 2<<20)
	held := t.TempDir()
	copyTree(t, src, held)
	b, _ := os.ReadFile(filepath.Join(held, "rank1.pt"))
	b[1000] ^= 1
	if err := os.WriteFile(filepath.Join(held, "rank1.pt"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 3)
	runs := restoreWith(t, st, addrs, nil, map[int]string{0: held}, Config{})
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		// Whether a node got the wrong copy depends on timing: the
		// survivor replaces it once its own check fails (TestBadPeers has
		// a holder that never does). What never depends on it: every
		// node ends with the right bytes.
		sameTree(t, src, r.dir)
	}
	if runs[0].res.Kept != 1 || runs[0].res.Downloaded != 1 {
		t.Fatalf("survivor: kept %d, downloaded %d; want its wrong copy fetched again", runs[0].res.Kept, runs[0].res.Downloaded)
	}
}

// Nodes that need different files share nothing: each reads its own from
// the bucket directly, with no spool and no peer in between (as fast as
// alone); a file two of them need is shared.
func TestDisjointFilesGoStraightToTheBucket(t *testing.T) {
	st, _ := step(t, 3<<20, 2<<20+9, 1<<20)
	addrs := freeAddrs(t, 3)
	paths := map[int]*restore.PathFilter{}
	for i, include := range [][]string{{"rank0.pt"}, {"rank1.pt", "rank2.pt"}, {"rank2.pt"}} {
		f, err := restore.NewPathFilter(include, nil)
		if err != nil {
			t.Fatal(err)
		}
		paths[i] = f
	}
	runs := restoreSelected(t, st, addrs, nil, nil, paths, Config{})
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		if got := r.bucket.bytes.Load(); got != r.stats.BucketBytes {
			t.Fatalf("node %d read %d bytes from the bucket, its stats say %d", i, got, r.stats.BucketBytes)
		}
	}
	if s := runs[0].stats; s.BucketBytes != 3<<20 || s.LocalBytes+s.PeerBytes+s.ServedBytes != 0 {
		t.Fatalf("node 0 read its own file through the spool or a peer: %+v", s)
	}
	// rank1.pt is node 1's alone; rank2.pt, which nodes 1 and 2 share,
	// leaves the bucket once.
	if runs[1].stats.BucketBytes+runs[2].stats.BucketBytes != 2<<20+9+1<<20 ||
		runs[1].stats.PeerBytes+runs[2].stats.PeerBytes != 1<<20 {
		t.Fatalf("the shared file: %+v and %+v, want it from the bucket once and from a peer once", runs[1].stats, runs[2].stats)
	}
}

// A peer that is listed but never starts costs at most the wait: the
// others restore without it, from the bucket.
func TestAbsentPeer(t *testing.T) {
	st, src := step(t, 3<<20, 1000)
	addrs := freeAddrs(t, 3)
	start := time.Now()
	runs := restoreTogether(t, st, addrs, map[int]bool{2: true}, Config{Wait: time.Second, Linger: time.Second})
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("restoring beside an absent peer took %s", d)
	}
	for i, r := range runs[:2] {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		sameTree(t, src, r.dir)
		if r.stats.Joined != 1 {
			t.Fatalf("node %d: joined %d, want 1", i, r.stats.Joined)
		}
	}
}

// fakePeer joins with a real plan and then serves what serve says.
func fakePeer(t *testing.T, addr string, p *plan, serve func(w http.ResponseWriter, r *http.Request)) {
	t.Helper()
	ln := listen(t, addr)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/plan":
			body, _ := json.Marshal(p)
			w.Header().Set(planHeader, planMAC(testKey, r.URL.Query().Get("nonce"), r.Host, body))
			_, _ = w.Write(body)
		case "/v1/range":
			serve(w, r)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// wrongBytes answers a range with as many bytes as asked, all wrong.
func wrongBytes(w http.ResponseWriter, r *http.Request) {
	n := r.URL.Query().Get("n")
	w.Header().Set("Content-Length", n)
	var k int
	fmt.Sscan(n, &k)
	_, _ = w.Write(bytes.Repeat([]byte{0x5a}, k))
}

// stepPlan is the plan of a node that restores all of step 1.
func stepPlan(t *testing.T, st store.Store) *plan {
	t.Helper()
	m, err := remote.Get(t.Context(), st, "run", 1)
	if err != nil {
		t.Fatal(err)
	}
	p := &plan{Step: 1, Chunk: 1 << 20}
	for _, f := range m.Files {
		p.Files = append(p.Files, object{Key: f.Key, Size: f.Size})
	}
	return p
}

// A peer that serves wrong bytes is caught by the manifest's BLAKE3 and
// dropped; the files it touched come from the bucket; nothing wrong is
// placed. A peer that stalls is dropped after the wait, one that refuses
// at once.
func TestBadPeers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter, r *http.Request)
		why   string
	}{
		{"wrong bytes", wrongBytes, "failed the manifest's BLAKE3"},
		{"dies mid-range", func(w http.ResponseWriter, r *http.Request) {
			n := r.URL.Query().Get("n")
			var k int
			fmt.Sscan(n, &k)
			w.Header().Set("Content-Length", n)
			_, _ = w.Write(make([]byte, k/2))
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // the process is gone
			}
		}, "mid-range"},
		{"stalls", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
		}, "timeout"},
		{"refuses", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no", http.StatusForbidden)
		}, "403"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, src := step(t, 4<<20, 2<<20+5, 1000, 77)
			addrs := freeAddrs(t, 3)
			// The bad peer says it holds every file: every range is
			// asked of it.
			p := stepPlan(t, st)
			p.Held, p.Files = p.Files, nil
			fakePeer(t, addrs[2], p, tc.serve)
			runs := restoreTogether(t, st, addrs, map[int]bool{2: true}, Config{Wait: 500 * time.Millisecond, Linger: 500 * time.Millisecond})
			for i, r := range runs[:2] {
				if r.err != nil {
					t.Fatalf("node %d: %v", i, r.err)
				}
				sameTree(t, src, r.dir)
				if why := r.stats.Dropped[addrs[2]]; !strings.Contains(why, tc.why) {
					t.Fatalf("node %d: the bad peer was dropped for %q, want %q (stats %+v)", i, why, tc.why, r.stats)
				}
			}
		})
	}
}

// A file in place whose path is a link is not held, so not served, even
// when the link's target has the manifest's size: a node serves only
// regular files below its target directory.
func TestLinkIsNotServed(t *testing.T) {
	st, src := step(t, 3000)
	addrs := freeAddrs(t, 2)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, bytes.Repeat([]byte("s"), 3000), 0o600); err != nil {
		t.Fatal(err)
	}
	holder := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(holder, "rank0.pt")); err != nil {
		t.Fatal(err)
	}
	// Node 0's directory holds the link before it restores.
	r0 := &nodeRun{dir: holder, bucket: &counted{Store: st}}
	r1 := &nodeRun{dir: t.TempDir(), bucket: &counted{Store: st}}
	var wg sync.WaitGroup
	for i, r := range []*nodeRun{r0, r1} {
		n, err := Start(Config{Bucket: r.bucket, Key: testKey, Listener: listen(t, addrs[i]), Peers: addrs, Self: i})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer n.Close()
			r.res, r.err = restore.Restore(t.Context(), restore.Options{Store: r.bucket, Prefix: "run", Dir: r.dir, Step: 1,
				ChunkSize: 1 << 20, Peers: n.Join})
			n.Finish(t.Context())
			r.stats = n.Stats()
		})
	}
	wg.Wait()
	for i, r := range []*nodeRun{r0, r1} {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		sameTree(t, src, r.dir)
		if r.stats.Fallbacks != 0 || len(r.stats.Dropped) != 0 {
			t.Fatalf("node %d: %+v: the link was offered as held", i, r.stats)
		}
	}
	if b, _ := os.ReadFile(outside); !bytes.Equal(b, bytes.Repeat([]byte("s"), 3000)) {
		t.Fatal("the link's target outside the directory was written")
	}
}

// Over TLS, a server that cannot prove its certificate with the job's key
// is not a peer: a node with another key is left out, and so is one that
// serves plain HTTP.
func TestTLSPeerMustProveItsCertificate(t *testing.T) {
	st, src := step(t, 2<<20, 100)
	for _, tc := range []struct {
		name  string
		other Config
	}{
		{"another key", Config{TLS: true, Key: KeyFromToken("another job")}},
		{"no TLS", Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := freeAddrs(t, 2)
			other := tc.other
			other.Bucket, other.Listener, other.Peers, other.Self, other.Wait = st, listen(t, addrs[1]), addrs, 1, 500*time.Millisecond
			if other.Key == nil {
				other.Key = testKey
			}
			n, err := Start(other)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if _, err := n.Join(t.Context(), restore.PeerRequest{Step: 1, Chunk: 1 << 20, Dir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			runs := restoreWith(t, st, addrs, map[int]bool{1: true}, nil, Config{TLS: true, Wait: 500 * time.Millisecond, Linger: 100 * time.Millisecond})
			if runs[0].err != nil {
				t.Fatal(runs[0].err)
			}
			sameTree(t, src, runs[0].dir)
			if runs[0].stats.Joined != 0 || runs[0].stats.PeerBytes != 0 {
				t.Fatalf("a node that cannot prove its certificate joined: %+v", runs[0].stats)
			}
		})
	}
}

// Requests without the job's key get nothing.
func TestPeerAuth(t *testing.T) {
	st, _ := step(t, 1000)
	addr := freeAddrs(t, 1)[0]
	n, err := Start(Config{Bucket: st, Key: testKey, Listener: listen(t, addr), Peers: []string{addr}, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Join(t.Context(), restore.PeerRequest{Step: 1, Chunk: 1 << 20, Fetch: []manifest.File{{Key: "run/data/x", Size: 10}}, Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	get := func(key []byte, sign bool, path string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if sign {
			signWith(req, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		key  []byte
		sign bool
		path string
		want int
	}{
		{nil, false, "/v1/plan", http.StatusUnauthorized},
		{KeyFromToken("another job"), true, "/v1/plan", http.StatusUnauthorized},
		{testKey, true, "/v1/plan", http.StatusOK},
		{testKey, true, "/v1/range?key=run%2Fdata%2Fother&i=0&skip=0&n=10&chunk=1048576", http.StatusNotFound},
		{testKey, true, "/v1/range?key=..%2F..%2Fetc%2Fpasswd&i=0&skip=0&n=10&chunk=1048576", http.StatusNotFound},
		{testKey, true, "/v1/range?key=run%2Fdata%2Fx&i=0&skip=0&n=10", http.StatusBadRequest},
	} {
		if got := get(tc.key, tc.sign, tc.path); got != tc.want {
			t.Errorf("GET %s signed %v: %d, want %d", tc.path, tc.sign, got, tc.want)
		}
	}
}

func signWith(r *http.Request, key []byte) { sign(r, key, time.Now()) }

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		off, end, size int64
		want           string
	}{
		{0, 11, 10, "0:0+4 1:0+4 2:0+3L"},
		{5, 9, 10, "1:1+3 2:0+1L"},
		{0, 1, 0, "0:0+1L"},
		{8, 11, 10, "2:0+3L"},
	} {
		var parts []string
		for _, s := range split(tc.off, tc.end, tc.size, 4) {
			l := ""
			if s.last {
				l = "L"
			}
			parts = append(parts, fmt.Sprintf("%d:%d+%d%s", s.i, s.skip, s.n, l))
		}
		if got := strings.Join(parts, " "); got != tc.want {
			t.Errorf("split(%d, %d, size %d): %s, want %s", tc.off, tc.end, tc.size, got, tc.want)
		}
	}
}

// A seed (the agent beside training) serves the committed step it holds:
// two nodes restoring it read nothing from the bucket. Of a step it does
// not hold it offers nothing, and they fetch that from the bucket.
func TestSeedServesWhatItHolds(t *testing.T) {
	st, src := step(t, 3<<20+5, 1<<20, 10)
	m, err := remote.Get(t.Context(), st, "run", 1)
	if err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 3)
	asked := map[int64]int{}
	var mu sync.Mutex
	seed, err := Seed(Config{Bucket: st, Key: testKey, Listener: listen(t, addrs[2])}, func(_ context.Context, step int64) (string, []heldfile.File, error) {
		mu.Lock()
		asked[step]++
		mu.Unlock()
		if step != 1 {
			return "", nil, nil
		}
		var files []heldfile.File
		for _, f := range m.Files {
			files = append(files, heldfile.File{File: f, Path: f.Path})
		}
		return src, files, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	runs := restoreWith(t, st, addrs, map[int]bool{2: true}, nil, Config{})
	for i, r := range runs[:2] {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		sameTree(t, src, r.dir)
		if got := r.bucket.bytes.Load(); got != 0 || r.stats.Joined != 2 {
			t.Fatalf("node %d read %d bytes from the bucket, joined %d: %+v", i, got, r.stats.Joined, r.stats)
		}
	}
	if s := seed.Stats(); s.ServedBytes != 2*(4<<20+15) || asked[1] != 2 {
		t.Fatalf("seed served %d bytes, was asked for step 1 %d times", s.ServedBytes, asked[1])
	}
}
