package agent

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/peer"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/restore"
)

// dataBytes counts the bytes of data objects read through it.
type dataBytes struct {
	store.Store
	n atomic.Int64
}

func (d *dataBytes) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := d.Store.Get(ctx, key, off, n)
	if err != nil || filepath.Base(filepath.Dir(key)) == "manifests" {
		return rc, err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	d.n.Add(int64(len(b)))
	return io.NopCloser(bytes.NewReader(b)), err
}

// The agent offers a committed step's files as they were committed: a
// node restoring the step beside a seed on the agent reads none of it from
// the bucket; a file changed since its commit is not offered (it comes
// from the bucket); a step the agent did not commit offers nothing.
func TestAgentServesCommittedSteps(t *testing.T) {
	// Peers exchange objects: packed files (under 4 MiB) are read from the
	// bucket, so these go one object per file.
	h := startAgent(t, func(o *Options) { o.Detect.ExpectedRanks = 2; o.Upload.NoPack = true })
	sim := trainsim.Options{Dir: h.watch, Ranks: 2, FileSize: 3<<20 + 7, Seed: 7}
	if err := trainsim.WriteStep(context.Background(), sim, 1); err != nil {
		t.Fatal(err)
	}
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	m, err := remote.Get(t.Context(), h.st, h.prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir, held, err := h.agent.Holdings(t.Context(), 1)
	if err != nil || len(held) != len(m.Files) {
		t.Fatalf("Holdings of the committed step: %d of %d files, %v", len(held), len(m.Files), err)
	}
	if _, none, err := h.agent.Holdings(t.Context(), 2); err != nil || len(none) != 0 {
		t.Fatalf("Holdings of a step never committed: %d files, %v", len(none), err)
	}
	// Peers asking again and again for plans of the step cost the bucket
	// nothing more: its manifest is read once per commit.
	gets := h.counters.Get("GetObject")
	for range 100 {
		if _, again, err := h.agent.Holdings(t.Context(), 1); err != nil || len(again) != len(held) {
			t.Fatalf("Holdings asked again: %d files, %v", len(again), err)
		}
	}
	if n := h.counters.Get("GetObject") - gets; n != 0 {
		t.Errorf("100 more plan requests read the manifest %d times from the bucket, want 0", n)
	}

	restoreBeside := func() (int64, string) {
		t.Helper()
		lns := make([]net.Listener, 2)
		addrs := make([]string, 2)
		for i := range lns {
			if lns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			addrs[i] = lns[i].Addr().String()
		}
		key := peer.KeyFromToken("job")
		seed, err := peer.Seed(peer.Config{Bucket: h.st, Key: key, Listener: lns[1]}, h.agent.Holdings)
		if err != nil {
			t.Fatal(err)
		}
		defer seed.Close()
		bucket := &dataBytes{Store: h.st}
		n, err := peer.Start(peer.Config{Bucket: bucket, Key: key, Listener: lns[0], Peers: addrs, Self: 0, Wait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		out := t.TempDir()
		if _, err := restore.Restore(t.Context(), restore.Options{Store: bucket, Prefix: h.prefix, Dir: out, Step: 1, Peers: n.Join}); err != nil {
			t.Fatal(err)
		}
		n.Finish(t.Context())
		for _, f := range m.Files {
			want, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
			got, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(f.Path)))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s restored beside the agent differs (%v)", f.Path, err)
			}
		}
		return bucket.n.Load(), out
	}
	if got, _ := restoreBeside(); got != 0 {
		t.Fatalf("restoring beside the agent read %d bytes from the bucket, want none", got)
	}

	// A file whose modification time changed after the commit is no
	// longer the committed file, as far as the agent can tell.
	changed := filepath.Join(dir, filepath.FromSlash(held[0].File.Path))
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(changed, later, later); err != nil {
		t.Fatal(err)
	}
	if _, again, _ := h.agent.Holdings(t.Context(), 1); len(again) != len(m.Files)-1 {
		t.Fatalf("Holdings after a file changed: %d files, want %d", len(again), len(m.Files)-1)
	}
	if got, _ := restoreBeside(); got != held[0].File.Size {
		t.Fatalf("restoring beside the agent read %d bytes from the bucket, want the changed file's %d", got, held[0].File.Size)
	}
}
