package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// The peer port is a door to the cluster network: these tests knock on it
// as someone without the job's key would.

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	return len(ents)
}

func stepManifest(t *testing.T, st store.Store) *manifest.Manifest {
	t.Helper()
	m, err := remote.Get(t.Context(), st, "run", 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// 500 plan requests to a seed leave its descriptors where they were: it
// opens the folder it serves from once, not per request.
func TestSeedPlansKeepDescriptorsFlat(t *testing.T) {
	st, src := step(t, 3<<20, 1000)
	m := stepManifest(t, st)
	addr := freeAddrs(t, 1)[0]
	seed, err := Seed(Config{Bucket: st, Key: testKey, Listener: listen(t, addr)}, func(_ context.Context, step int64) (string, []heldfile.File, error) {
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
	ask := func() {
		if _, held := planKeys(t, addr, "/v1/plan?step=1&chunk=1048576&from=x&nonce="+newNonce()); len(held) != 2 {
			t.Fatalf("the seed offers %d files, want 2", len(held))
		}
	}
	ask() // the client's connection and the folder, once
	before := openFDs(t)
	for range 500 {
		ask()
	}
	if after := openFDs(t); after > before+10 {
		t.Fatalf("500 plan requests took the process from %d to %d descriptors", before, after)
	}
}

// knock opens a connection to addr, from the address from, that sends one
// unsigned request, reads the refusal and then stays idle (or, without
// request, sends nothing), and returns when the server closed it. answered: the refusal came
// (before the deadline give); an error: the connection was still open at
// the deadline.
func knock(addr, from string, request bool, give time.Duration) (answered bool, err error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(give))
	r := bufio.NewReader(c)
	if request {
		if _, err := c.Write([]byte("GET /v1/plan HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
			return false, err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return false, fmt.Errorf("answered %s", resp.Status)
		}
		answered = true
	}
	_, err = r.ReadByte() // EOF once the server closes the connection
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return answered, err
	}
	return answered, nil
}

// 300 connections to a restoring node's peer port, half of them idle
// after a refused request, half never sending one, are all closed by the
// server's limits while it runs, and the honest restore beside them
// finishes with every byte right.
func TestIdleConnectionsAreClosed(t *testing.T) {
	st, src := step(t, 3<<20, 1000)
	addrs := freeAddrs(t, 2)
	runs := []*nodeRun{{dir: t.TempDir(), bucket: &counted{Store: st}}, {dir: t.TempDir(), bucket: &counted{Store: st}}}
	var nodes []*Node
	for i, r := range runs {
		n, err := Start(Config{Bucket: r.bucket, Key: testKey, Listener: listen(t, addrs[i]), Peers: addrs, Self: i, SpoolDir: r.dir,
			Wait: 5 * time.Second, Linger: time.Second, limits: serverLimits{header: time.Second, idle: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close() // only once the connections are closed: by the limits, not by Close
		nodes = append(nodes, n)
	}
	var conns sync.WaitGroup
	errs := make(chan error, 300)
	for i := range 300 {
		conns.Go(func() {
			// From three addresses, none of them the nodes' own: each
			// stays under the per-address cap (tested on its own below).
			if _, err := knock(addrs[0], fmt.Sprintf("127.0.0.%d", 2+i%3), i%2 == 0, 20*time.Second); err != nil {
				errs <- err
			}
		})
	}
	var restores sync.WaitGroup
	for i, r := range runs {
		restores.Go(func() {
			r.res, r.err = restore.Restore(t.Context(), restore.Options{Store: r.bucket, Prefix: "run", Dir: r.dir, Step: 1,
				ChunkSize: 1 << 20, Peers: nodes[i].Join})
			nodes[i].Finish(t.Context())
			r.stats = nodes[i].Stats()
		})
	}
	restores.Wait()
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("node %d: %v", i, r.err)
		}
		sameTree(t, src, r.dir)
		if r.stats.Joined != 1 {
			t.Fatalf("node %d joined %d peers, want 1: %+v", i, r.stats.Joined, r.stats)
		}
	}
	conns.Wait()
	close(errs)
	bad := 0
	for err := range errs {
		if bad++; bad == 1 {
			t.Errorf("an idle connection was not closed by the server: %v", err)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 300 idle connections stayed open", bad)
	}
}

// Connections beyond the cap wait in the backlog, unserved, until others
// close: of 100 held open, 16 are answered.
func TestConnectionCap(t *testing.T) {
	st, _ := step(t, 1000)
	addr := freeAddrs(t, 1)[0]
	n, err := Start(Config{Bucket: st, Key: testKey, Listener: listen(t, addr), Peers: []string{addr},
		limits: serverLimits{conns: 16, header: time.Minute, idle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var answered atomic.Int64
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 100 {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Write([]byte("GET /v1/plan HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
				t.Error(err)
				return
			}
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
				answered.Add(1)
			}
			<-release // every connection stays open until all have tried
		})
	}
	time.Sleep(2500 * time.Millisecond)
	close(release)
	wg.Wait()
	if got := answered.Load(); got != 16 {
		t.Fatalf("%d of 100 connections held open were served; the cap is 16", got)
	}
}

// One address cannot take every slot: of 20 connections it holds open, 8
// (its cap) are answered and the rest closed at once, and another address
// is still served meanwhile; once its connections close, it gets slots
// again.
func TestConnectionCapPerAddress(t *testing.T) {
	st, _ := step(t, 1000)
	addr := freeAddrs(t, 1)[0]
	n, err := Start(Config{Bucket: st, Key: testKey, Listener: listen(t, addr), Peers: []string{addr},
		limits: serverLimits{conns: 64, perAddr: 8, header: time.Minute, idle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ask := func(from string) (net.Conn, bool) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("GET /v1/plan HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")); err != nil {
			return c, false // closed before the request was sent
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return c, false
		}
		resp.Body.Close()
		return c, true
	}
	var held []net.Conn
	answered := 0
	for range 20 {
		c, ok := ask("127.0.0.1")
		held = append(held, c)
		if ok {
			answered++
		}
	}
	if answered != 8 {
		t.Errorf("%d of 20 connections from one address held open were served; its cap is 8", answered)
	}
	if c, ok := ask("127.0.0.2"); !ok {
		t.Error("another address was not served while the first held its cap")
	} else {
		c.Close()
	}
	for _, c := range held {
		c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, ok := ask("127.0.0.1")
		c.Close()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first address got no slot back after closing its connections")
		}
	}
}

// endlessPlan answers a plan request with JSON that never ends, counting
// what it sent.
func endlessPlan(sent *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(planHeader, "0")
		chunk := []byte(strings.Repeat(`{"key":"run/data/x","size":1},`, 1000))
		k, err := w.Write([]byte(`{"step":1,"chunk":1048576,"files":[`))
		for sent.Add(int64(k)); err == nil; sent.Add(int64(k)) {
			k, err = w.Write(chunk)
		}
	}
}

// A fake peer answering the plan request with an endless plan costs the
// restoring node a bounded read and memory: it is left out, and the
// restore finishes from the bucket. One answering a plausible plan
// without the job's MAC over it (and the asker's nonce) is left out too.
func TestFakePeerPlans(t *testing.T) {
	st, src := step(t, 3<<20, 1000)
	for _, tc := range []struct {
		name string
		plan func(sent *atomic.Int64) http.HandlerFunc
	}{
		{"endless", endlessPlan},
		{"unsigned", func(*atomic.Int64) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				p := stepPlan(t, st)
				p.Held, p.Files = p.Files, nil // every range would be asked of it
				_ = json.NewEncoder(w).Encode(p)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := freeAddrs(t, 2)
			var sent atomic.Int64
			ln := listen(t, addrs[1])
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/plan" {
					tc.plan(&sent)(w, r)
					return
				}
				wrongBytes(w, r)
			})}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			var peak atomic.Uint64
			done := make(chan struct{})
			go func() {
				var ms runtime.MemStats
				for {
					runtime.ReadMemStats(&ms)
					if ms.HeapAlloc > peak.Load() {
						peak.Store(ms.HeapAlloc)
					}
					select {
					case <-done:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			runs := restoreTogether(t, st, addrs, map[int]bool{1: true}, Config{Wait: 3 * time.Second, Linger: time.Second})
			close(done)
			r := runs[0]
			if r.err != nil {
				t.Fatal(r.err)
			}
			sameTree(t, src, r.dir)
			if r.stats.Joined != 0 || r.stats.PeerBytes != 0 {
				t.Fatalf("the fake peer joined: %+v", r.stats)
			}
			// What the kernel's socket buffers hold beyond the limit.
			if got := sent.Load(); got > maxPlanBytes+32<<20 {
				t.Fatalf("the fake peer sent %d MiB of plan; the limit is %d MiB", got>>20, maxPlanBytes>>20)
			}
			if got := peak.Load(); got > 256<<20 {
				t.Fatalf("the heap reached %d MiB reading a fake plan", got>>20)
			}
		})
	}
}
