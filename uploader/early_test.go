package uploader

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// SendEarly leaves alone files no larger than the part size (they may end
// up in one PUT) and part sizes that are not a power of two (not a BLAKE3
// subtree, so no digest could identify the part).
func TestEarlyNeverSendsPartOfSmallFile(t *testing.T) {
	st := store.NewMemStore()
	dir, big := t.TempDir(), t.TempDir()
	writeRandom(t, filepath.Join(dir, "small.pt"), earlyPart, 1)
	writeRandom(t, filepath.Join(big, "big.pt"), 2*earlyPart, 1)
	dest := Destination{Store: st, Location: "s3://b/run", Prefix: "run", StateDir: t.TempDir()}
	es, err := dest.SendEarly(context.Background(), gather(t, dir, 7), PushOptions{Upload: Options{PartSize: earlyPart}}, func() bool { return false })
	if err != nil || es.Parts != 0 {
		t.Fatalf("SendEarly of a file of one part: %+v, %v; want nothing sent", es, err)
	}
	es, err = dest.SendEarly(context.Background(), gather(t, big, 7), PushOptions{Upload: Options{PartSize: 6 << 20}}, func() bool { return false })
	if err != nil || es.Parts != 0 {
		t.Fatalf("SendEarly with a part size not a power of two: %+v, %v; want nothing sent", es, err)
	}
}

func TestEarlyPartSize(t *testing.T) {
	for _, c := range []struct{ part, want int64 }{
		{64 << 20, 16 << 20}, {128 << 20, 32 << 20}, {32 << 20, 8 << 20}, {16 << 20, 8 << 20}, {8 << 20, 8 << 20}, {6 << 20, 6 << 20},
	} {
		if got := earlyPartSize(c.part); got != c.want {
			t.Errorf("earlyPartSize(%d MiB) = %d MiB, want %d MiB", c.part>>20, got>>20, c.want>>20)
		}
	}
}

// Parts sent early are a quarter of the part size, and the push keeps
// them: it sends only the rest, in parts of the same size, and the object
// is the file. A file grown past store.MaxParts of them would be sent
// again in its own part size (partSizeFor).
func TestEarlyQuarterPartsKeptAtPush(t *testing.T) {
	srv := s3test.Shared(t)
	st := &listCounter{Store: srv.Store(t, srv.NewBucket(t))}
	dir := t.TempDir()
	path := filepath.Join(dir, "model.pt")
	first := writeRandom(t, path, 5*earlyPart+100, 1) // 40 MiB and more: 5 whole 8 MiB parts
	dest := Destination{Store: st, Location: "s3://b/run", Prefix: "run", StateDir: t.TempDir()}
	opts := PushOptions{Upload: Options{PartSize: 4 * earlyPart}}
	es, err := dest.SendEarly(t.Context(), gather(t, dir, 7), opts, func() bool { return false })
	if err != nil || es.Parts != 5 || es.Bytes != 5*earlyPart {
		t.Fatalf("SendEarly: %+v, %v; want the 5 whole 8 MiB parts below the end", es, err)
	}
	final := appendFile(t, path, first, randomData(earlyPart, 2))
	res, err := dest.Push(t.Context(), gather(t, dir, 7), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.PartsResumed != 5 || res.Stats.PartsResent != 0 || res.Stats.PartsSent != 2 {
		t.Errorf("push: parts kept %d, re-sent %d, sent %d; want 5, 0, 2", res.Stats.PartsResumed, res.Stats.PartsResent, res.Stats.PartsSent)
	}
	if n := st.lists.Load(); n != 0 {
		t.Errorf("push listed the parts %d times; want none (the server's answers were recorded as they were sent)", n)
	}
	checkCommitted(t, st, res.Manifest, final)
	if ps := res.Manifest.Files[0].PartSize; ps != earlyPart {
		t.Errorf("manifest part size %d, want the early parts' %d", ps, earlyPart)
	}
}

// listCounter counts ListParts calls.
type listCounter struct {
	store.Store
	lists atomic.Int32
}

func (l *listCounter) ListParts(ctx context.Context, key, uploadID string) ([]store.Part, error) {
	l.lists.Add(1)
	return l.Store.ListParts(ctx, key, uploadID)
}

// When the server refuses to complete an upload with the parts recorded as
// sent early (the upload aborted meanwhile, or a recorded answer that does
// not match), the push lists the parts instead, or starts over, and the
// committed object is still the file, with one push.
func TestEarlyRecordedPartsRefused(t *testing.T) {
	for _, tc := range []string{"upload aborted", "answer not the server's"} {
		t.Run(tc, func(t *testing.T) {
			srv := s3test.Shared(t)
			st := &listCounter{Store: srv.Store(t, srv.NewBucket(t))}
			dir, stateDir := t.TempDir(), t.TempDir()
			path := filepath.Join(dir, "model.pt")
			first := writeRandom(t, path, 2*earlyPart+100, 1)
			dest := Destination{Store: st, Location: "s3://b/run", Prefix: "run", StateDir: stateDir}
			opts := PushOptions{Upload: Options{PartSize: earlyPart}}
			if es, err := dest.SendEarly(t.Context(), gather(t, dir, 7), opts, func() bool { return false }); err != nil || es.Parts != 2 {
				t.Fatalf("SendEarly: %+v, %v; want 2 parts", es, err)
			}
			state, err := loadPushState(newPush(dest, gather(t, dir, 7), opts))
			if err != nil {
				t.Fatal(err)
			}
			key, up := onlyUpload(t, state)
			if tc == "upload aborted" {
				if err := st.AbortMultipart(t.Context(), key, up.UploadID); err != nil {
					t.Fatal(err)
				}
			} else {
				up.Sent[1] = sentPart{ETag: `"0123456789abcdef0123456789abcdef"`, CRC32C: up.Sent[1].CRC32C}
				if err := state.Put(key, up); err != nil {
					t.Fatal(err)
				}
			}
			final := appendFile(t, path, first, randomData(earlyPart, 2))
			res, err := dest.Push(t.Context(), gather(t, dir, 7), opts)
			if err != nil {
				t.Fatalf("push after the server refused the recorded parts: %v", err)
			}
			if st.lists.Load() != 1 {
				t.Errorf("parts listed %d times, want once, after the refusal", st.lists.Load())
			}
			checkCommitted(t, st, res.Manifest, final)
		})
	}
}

// onlyUpload returns the one upload a state records.
func onlyUpload(t *testing.T, state *resumeState) (string, pendingUpload) {
	t.Helper()
	ups := state.Uploads()
	if len(ups) != 1 {
		t.Fatalf("state records %d uploads, want 1", len(ups))
	}
	for k, up := range ups {
		return k, up
	}
	panic("unreachable")
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

// gatedStore holds back the parts of one key until released, and reports
// the keys of the other parts it is sent.
type gatedStore struct {
	store.Store
	held    string
	release chan struct{}
	sent    chan string
}

func (g *gatedStore) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	if strings.HasSuffix(key, g.held) {
		select {
		case <-g.release:
		case <-ctx.Done():
			return store.Part{}, ctx.Err()
		}
	} else {
		select {
		case g.sent <- key:
		default:
		}
	}
	return g.Store.UploadPart(ctx, key, uploadID, n, body, size, crc32c)
}

// While parts of one file are in flight, SendEarly keeps watching the
// step's other files: one that grows past the part size meanwhile has its
// whole parts sent in the same call, not after the other file's parts are
// answered. (An agent's call lasts as long as parts are in flight; before,
// a rank's file small at the call's start got nothing until the end.)
func TestEarlyWatchesFilesThatGrowDuringTheCall(t *testing.T) {
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "a.pt"), 2*earlyPart+100, 1)
	bPath := filepath.Join(dir, "b.pt")
	first := writeRandom(t, bPath, 1<<20, 2)
	snapshot := gather(t, dir, 7) // b is 1 MiB here
	st := &gatedStore{Store: store.NewMemStore(), held: "/a.pt", release: make(chan struct{}), sent: make(chan string, 1)}
	dest := Destination{Store: st, Location: "s3://b/run", Prefix: "run", StateDir: t.TempDir()}
	done := make(chan EarlyStats, 1)
	go func() {
		es, err := dest.SendEarly(t.Context(), snapshot, PushOptions{Upload: Options{PartSize: earlyPart}}, func() bool { return false })
		if err != nil {
			t.Error(err)
		}
		done <- es
	}()
	appendFile(t, bPath, first, randomData(2*earlyPart, 3))
	select {
	case key := <-st.sent:
		if !strings.HasSuffix(key, "/b.pt") {
			t.Errorf("part sent for %s, want b.pt", key)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b.pt grew past the part size while a.pt's parts were in flight, and none of its parts was sent")
	}
	close(st.release)
	if es := <-done; es.Parts != 4 {
		t.Errorf("parts sent %d, want a.pt's 2 and b.pt's 2", es.Parts)
	}
}
