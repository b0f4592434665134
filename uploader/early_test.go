package uploader

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// earlyPart is a power of two (a whole BLAKE3 subtree) above the stores'
// minimum part size.
const earlyPart = 8 << 20

// Parts sent while a file was written are kept only where the final bytes
// hash to what was sent: an append-only writer re-sends nothing; a file
// rewritten in place, truncated and rewritten, or replaced by a rename has
// its stale parts sent again; a file that ends up small goes in one PUT
// and its early upload is aborted. Every committed object equals the file,
// and the manifest's BLAKE3 is the file's.
func TestEarlyPartsVerifiedAtPush(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"mem": func(*testing.T) store.Store { return store.NewMemStore() },
		"versitygw": func(t *testing.T) store.Store {
			srv := s3test.Shared(t)
			return srv.Store(t, srv.NewBucket(t))
		},
	}
	cases := []struct {
		name   string
		finish func(t *testing.T, path string, first []byte) []byte
		resent int64
		kept   int64
	}{
		{"append-only", func(t *testing.T, path string, first []byte) []byte {
			return appendFile(t, path, first, randomData(earlyPart, 2))
		}, 0, 2},
		{"rewritten in place", func(t *testing.T, path string, first []byte) []byte {
			data := append([]byte(nil), first...)
			data[earlyPart+5] ^= 0xff // part 2
			writeFileAt(t, path, data[earlyPart+5:earlyPart+6], earlyPart+5)
			return appendFile(t, path, data, randomData(earlyPart, 3))
		}, 1, 1},
		{"truncated and rewritten", func(t *testing.T, path string, _ []byte) []byte {
			data := randomData(3*earlyPart+100, 4)
			if err := os.WriteFile(path, data, 0o644); err != nil { // O_TRUNC
				t.Fatal(err)
			}
			return data
		}, 2, 0},
		{"replaced by a rename", func(t *testing.T, path string, _ []byte) []byte {
			data := randomData(3*earlyPart, 5)
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			return data
		}, 2, 0},
		{"ends small", func(t *testing.T, path string, _ []byte) []byte {
			data := randomData(1000, 6)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			return data
		}, 0, 0},
	}
	for sname, newStore := range stores {
		for _, tc := range cases {
			t.Run(sname+"/"+tc.name, func(t *testing.T) {
				st := newStore(t)
				dir, stateDir := t.TempDir(), t.TempDir()
				path := filepath.Join(dir, "model.pt")
				first := writeRandom(t, path, 2*earlyPart+earlyPart/2, 1)
				dest := Destination{Store: st, Location: "s3://b/run", Prefix: "run", StateDir: stateDir}
				opts := PushOptions{Upload: Options{PartSize: earlyPart}}
				es, err := dest.SendEarly(t.Context(), gather(t, dir, 7), opts, func() bool { return false })
				if err != nil || es.Parts != 2 {
					t.Fatalf("SendEarly: %+v, %v; want the 2 whole parts below the end", es, err)
				}
				final := tc.finish(t, path, first)
				res, err := dest.Push(t.Context(), gather(t, dir, 7), opts)
				if err != nil {
					t.Fatal(err)
				}
				if res.Stats.PartsResent != tc.resent || res.Stats.PartsResumed != tc.kept {
					t.Errorf("parts re-sent %d, kept %d; want %d, %d", res.Stats.PartsResent, res.Stats.PartsResumed, tc.resent, tc.kept)
				}
				checkCommitted(t, st, res.Manifest, final)
				if tc.name == "ends small" {
					ups, err := st.ListUploads(t.Context(), "run/")
					if err != nil || len(ups) != 0 {
						t.Errorf("uploads left: %+v, %v; want the early one aborted", ups, err)
					}
				}
			})
		}
	}
}

// SendEarly leaves alone files under two parts (nothing whole below a
// growing end) and part sizes that are not a power of two (not a BLAKE3
// subtree, so no digest could identify the part).
func TestEarlyNeverSendsPartOfSmallFile(t *testing.T) {
	st := store.NewMemStore()
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "small.pt"), earlyPart+earlyPart/2, 1)
	dest := Destination{Store: st, Location: "s3://b/run", Prefix: "run", StateDir: t.TempDir()}
	es, err := dest.SendEarly(context.Background(), gather(t, dir, 7), PushOptions{Upload: Options{PartSize: earlyPart}}, func() bool { return false })
	if err != nil || es.Parts != 0 {
		t.Fatalf("SendEarly of a file under two parts: %+v, %v; want nothing sent", es, err)
	}
	es, err = dest.SendEarly(context.Background(), gather(t, dir, 7), PushOptions{Upload: Options{PartSize: 6 << 20}}, func() bool { return false })
	if err != nil || es.Parts != 0 {
		t.Fatalf("SendEarly with a part size not a power of two: %+v, %v; want nothing sent", es, err)
	}
}

func gather(t *testing.T, dir string, n int64) detect.Step {
	t.Helper()
	s, _, err := detect.Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Number = n
	return s
}

// checkCommitted checks that the manifest holds one file whose object and
// BLAKE3 are data's.
func checkCommitted(t *testing.T, st store.Store, m *manifest.Manifest, data []byte) {
	t.Helper()
	if m == nil || len(m.Files) != 1 {
		t.Fatalf("manifest %+v, want one file", m)
	}
	f := m.Files[0]
	if f.BLAKE3 != b3(data) || f.Size != int64(len(data)) {
		t.Errorf("manifest says %d bytes, BLAKE3 %s; the file has %d bytes, %s", f.Size, f.BLAKE3, len(data), b3(data))
	}
	if got := readObject(t, st, f.Key); !bytes.Equal(got, data) {
		t.Errorf("object %s (%d bytes) differs from the file (%d bytes)", f.Key, len(got), len(data))
	}
}

func randomData(n int, seed int64) []byte {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(int64(i)*31 + seed*7 + int64(i>>9))
	}
	return data
}

func appendFile(t *testing.T, path string, have, more []byte) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(more); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return append(append([]byte(nil), have...), more...)
}

func writeFileAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(b, off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}
