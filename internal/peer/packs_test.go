package peer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

// peerGet sends a request signed with the job's key to a node and returns
// the status and body.
func peerGet(t *testing.T, addr, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	signWith(req, testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// planKeys returns the keys of the files and the held files of the plan
// a node serves at path.
func planKeys(t *testing.T, addr, path string) (files, held []string) {
	t.Helper()
	status, body := peerGet(t, addr, path)
	var p plan
	if err := json.Unmarshal(body, &p); status != http.StatusOK || err != nil {
		t.Fatalf("plan of %s: %d %s", addr, status, body)
	}
	for _, o := range p.Files {
		files = append(files, o.Key)
	}
	for _, o := range p.Held {
		held = append(held, o.Key)
	}
	return files, held
}

// A pack names several files, none of which is the pack: a node neither
// plans to share a pack nor serves one, though it holds its files; it
// shares and serves the step's unpacked files.
func TestPackIsNotServed(t *testing.T) {
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	dir := t.TempDir()
	for name, size := range map[string]int{"big.pt": uploader.PackFileLimit + 1, "a.json": 1000, "b.json": 2000} {
		b := make([]byte, size)
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := steptest.Push(t, st, "run", dir, 1, uploader.PushOptions{})
	var own, pack string
	var held []heldfile.File
	for _, f := range m.Files {
		if f.Packed() {
			pack = f.Key
		} else {
			own = f.Key
		}
		held = append(held, heldfile.File{File: f, Path: f.Path})
	}
	if own == "" || pack == "" {
		t.Fatalf("the push wrote no pack or no object of its own: %+v", m.Files)
	}
	addrs := freeAddrs(t, 2)
	seed, err := Seed(Config{Bucket: st, Key: testKey, Listener: listen(t, addrs[0])}, func(context.Context, int64) (string, []heldfile.File, error) {
		return dir, held, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	n, err := Start(Config{Bucket: st, Key: testKey, Listener: listen(t, addrs[1]), Peers: addrs[1:], SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Join(t.Context(), restore.PeerRequest{Step: 1, Chunk: 1 << 20, Fetch: m.Files, Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}

	if files, _ := planKeys(t, addrs[1], "/v1/plan?from=test"); !slices.Equal(files, []string{own}) {
		t.Fatalf("a restoring node plans to share %v, want only %s", files, own)
	}
	if _, seedHeld := planKeys(t, addrs[0], "/v1/plan?from=test&step=1&chunk=1048576"); !slices.Equal(seedHeld, []string{own}) {
		t.Fatalf("the seed offers %v, want only %s", seedHeld, own)
	}
	rangeOf := func(key string) string {
		return "/v1/range?key=" + url.QueryEscape(key) + "&i=0&skip=0&n=10&chunk=1048576"
	}
	if status, body := peerGet(t, addrs[0], rangeOf(pack)); status != http.StatusNotFound {
		t.Fatalf("the seed served the pack %s: %d %q", pack, status, body)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "big.pt"))
	if status, body := peerGet(t, addrs[0], rangeOf(own)); status != http.StatusOK || !bytes.Equal(body, want[:10]) {
		t.Fatalf("the seed's range of %s: %d, %d bytes", own, status, len(body))
	}
}
