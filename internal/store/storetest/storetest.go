// Package storetest is a behaviour suite every store.Store must pass, run
// against the in-memory store and the real S3 server alike, so that logic
// tested on MemStore holds on S3.
package storetest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
)

// Option adjusts what the suite accepts of a store.
type Option func(*options)

type options struct {
	partChecksumsOptional bool
}

// PartChecksumsOptional accepts a ListParts that reports no CRC32C for a
// part (SeaweedFS): a CRC32C it does report must still be right. ferry
// then cannot verify a part it sent before, and sends it again rather
// than complete the upload with it (the uploader and copy reuse a listed
// part only when its CRC32C matches).
func PartChecksumsOptional() Option { return func(o *options) { o.partChecksumsOptional = true } }

// Run runs the suite. newStore returns an empty store (a fresh bucket) for
// each subtest; it must not call t.Parallel.
func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	var o options
	for _, fn := range opts {
		fn(&o)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"PutGet", testPutGet},
		{"EmptyObject", testEmptyObject},
		{"Ranges", testRanges},
		{"Missing", testMissing},
		{"List", testList},
		{"ListPages", testListPages},
		{"Delete", testDelete},
		{"ConditionalCreate", testConditionalCreate},
		{"ConditionalRace", testConditionalRace},
		{"ConditionalReplace", testConditionalReplace},
		{"PutCRC32CMismatch", testPutCRC32CMismatch},
		{"Multipart", func(t *testing.T, s store.Store) { testMultipart(t, s, o) }},
		{"PartCRC32CMismatch", testPartCRC32CMismatch},
		{"AbortAndListUploads", testAbortAndListUploads},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// RandomBytes returns n pseudo-random bytes determined by seed.
func RandomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n+7)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n:n]
}

// MustPut writes data to key with its CRC32C, failing t on error.
func MustPut(t testing.TB, s store.Store, key string, data []byte) store.ObjectInfo {
	t.Helper()
	info, err := s.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{CRC32C: store.CRC32C(data)})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

// MustGet reads length bytes of key from off, failing t on error.
func MustGet(t testing.TB, s store.Store, key string, off, length int64) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key, off, length)
	if err != nil {
		t.Fatalf("get %s [%d, +%d): %v", key, off, length, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s [%d, +%d): %v", key, off, length, err)
	}
	return data
}

// listKeys returns the keys List passes to its callback.
func listKeys(t *testing.T, s store.Store, prefix, startAfter string, maxKeys int) []string {
	t.Helper()
	var keys []string
	err := s.List(t.Context(), prefix, startAfter, maxKeys, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("list %q after %q max %d: %v", prefix, startAfter, maxKeys, err)
	}
	return keys
}

func testPutGet(t *testing.T, s store.Store) {
	data := RandomBytes(1, 100_000)
	info := MustPut(t, s, "dir/obj", data)
	if info.Key != "dir/obj" || info.Size != int64(len(data)) || info.ETag == "" {
		t.Errorf("Put returned %+v", info)
	}
	if got := MustGet(t, s, "dir/obj", 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("Get returned %d bytes that differ from the %d put", len(got), len(data))
	}
	head, err := s.Head(t.Context(), "dir/obj")
	if err != nil {
		t.Fatal(err)
	}
	if head.Size != int64(len(data)) || head.ETag == "" || head.Key != "dir/obj" {
		t.Errorf("Head returned %+v", head)
	}
	// A second Put without IfNoneMatch replaces the object.
	data2 := RandomBytes(2, 10)
	MustPut(t, s, "dir/obj", data2)
	if got := MustGet(t, s, "dir/obj", 0, -1); !bytes.Equal(got, data2) {
		t.Fatalf("overwrite: got %x, want %x", got, data2)
	}
	// Put without a checksum works too.
	if _, err := s.Put(t.Context(), "dir/nocrc", bytes.NewReader(data2), int64(len(data2)), store.PutOptions{}); err != nil {
		t.Fatalf("put without CRC32C: %v", err)
	}
}

func testEmptyObject(t *testing.T, s store.Store) {
	MustPut(t, s, "empty", nil)
	head, err := s.Head(t.Context(), "empty")
	if err != nil {
		t.Fatal(err)
	}
	if head.Size != 0 {
		t.Errorf("Head size %d, want 0", head.Size)
	}
	if got := MustGet(t, s, "empty", 0, -1); len(got) != 0 {
		t.Errorf("Get returned %d bytes, want 0", len(got))
	}
	if keys := listKeys(t, s, "", "", 0); !slices.Equal(keys, []string{"empty"}) {
		t.Errorf("List = %q", keys)
	}
}

func testRanges(t *testing.T, s store.Store) {
	data := RandomBytes(3, 1000)
	MustPut(t, s, "r", data)
	for _, c := range []struct {
		name        string
		off, length int64
		want        []byte
	}{
		{"start", 0, 10, data[:10]},
		{"middle", 500, 100, data[500:600]},
		{"end", 990, 10, data[990:]},
		{"to end", 990, -1, data[990:]},
		{"whole", 0, -1, data},
		{"past end clipped", 995, 100, data[995:]},
		{"last byte", 999, 1, data[999:]},
		{"empty at end", 1000, -1, nil},
		{"zero length", 10, 0, nil},
	} {
		if got := MustGet(t, s, "r", c.off, c.length); !bytes.Equal(got, c.want) {
			t.Errorf("%s: Get(%d, %d) returned %d bytes, want %d equal to the object's", c.name, c.off, c.length, len(got), len(c.want))
		}
	}
}

func testMissing(t *testing.T, s store.Store) {
	if _, err := s.Head(t.Context(), "nope"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Head of a missing key: %v, want ErrNotExist", err)
	}
	if _, err := s.Get(t.Context(), "nope", 0, -1); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Get of a missing key: %v, want ErrNotExist", err)
	}
	if _, err := s.Get(t.Context(), "nope", 5, 10); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("ranged Get of a missing key: %v, want ErrNotExist", err)
	}
	if keys := listKeys(t, s, "nope", "", 0); len(keys) != 0 {
		t.Errorf("List of an empty prefix = %q", keys)
	}
}

func testList(t *testing.T, s store.Store) {
	// No key is both an object and a prefix of others ending in "/": POSIX
	// backed servers (versitygw) store such keys as files and directories.
	keys := []string{"a/2", "a/1", "a/10", "b/1", "a-x", "ab/1", "c"}
	for i, k := range keys {
		MustPut(t, s, k, []byte(k+fmt.Sprint(i)))
	}
	check := func(name string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	check("all", listKeys(t, s, "", "", 0), []string{"a-x", "a/1", "a/10", "a/2", "ab/1", "b/1", "c"})
	check("prefix a/", listKeys(t, s, "a/", "", 0), []string{"a/1", "a/10", "a/2"})
	check("prefix a", listKeys(t, s, "a", "", 0), []string{"a-x", "a/1", "a/10", "a/2", "ab/1"})
	check("startAfter a/1", listKeys(t, s, "a/", "a/1", 0), []string{"a/10", "a/2"})
	check("startAfter between keys", listKeys(t, s, "", "a/11", 0), []string{"a/2", "ab/1", "b/1", "c"})
	check("startAfter before prefix", listKeys(t, s, "b/", "a-x", 0), []string{"b/1"})
	check("startAfter past all", listKeys(t, s, "", "d", 0), nil)
	check("maxKeys 1", listKeys(t, s, "a/", "", 1), []string{"a/1"})
	check("maxKeys 2 after", listKeys(t, s, "", "a/1", 2), []string{"a/10", "a/2"})
	check("maxKeys beyond", listKeys(t, s, "a/", "", 100), []string{"a/1", "a/10", "a/2"})

	infos := map[string]store.ObjectInfo{}
	err := s.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error {
		infos[o.Key] = o
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if o := infos["a/10"]; o.Size != int64(len("a/10")+1) || o.ETag == "" {
		t.Errorf("listed info of a/10: %+v", o)
	}

	var seen []string
	err = s.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error {
		seen = append(seen, o.Key)
		if len(seen) == 3 {
			return store.ErrStopList
		}
		return nil
	})
	if err != nil {
		t.Errorf("List stopped with ErrStopList returned %v, want nil", err)
	}
	check("ErrStopList", seen, []string{"a-x", "a/1", "a/10"})

	boom := errors.New("boom")
	err = s.List(t.Context(), "", "", 0, func(store.ObjectInfo) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("List returned %v, want the callback's error", err)
	}
}

// listPageKeys is more than one 1,000-key page of ListObjectsV2.
const listPageKeys = 1100

func testListPages(t *testing.T, s store.Store) {
	want := make([]string, listPageKeys)
	for i := range want {
		want[i] = fmt.Sprintf("p/%05d", i)
	}
	putConcurrently(t, s, want)
	MustPut(t, s, "q", []byte("outside the prefix"))

	if got := listKeys(t, s, "p/", "", 0); !slices.Equal(got, want) {
		t.Fatalf("listed %d keys (first %q), want %d in order", len(got), first(got), len(want))
	}
	if got := listKeys(t, s, "p/", "", 1050); !slices.Equal(got, want[:1050]) {
		t.Errorf("maxKeys 1050: listed %d keys, want 1050", len(got))
	}
	if got := listKeys(t, s, "p/", want[999], 0); !slices.Equal(got, want[1000:]) {
		t.Errorf("startAfter %s: listed %d keys, want %d", want[999], len(got), len(want)-1000)
	}
	if got := listKeys(t, s, "", want[1098], 0); !slices.Equal(got, []string{want[1099], "q"}) {
		t.Errorf("startAfter %s: listed %q", want[1098], got)
	}
}

func first(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

// putConcurrently writes small objects under keys with 16 writers, to keep
// the suite fast against a real server.
func putConcurrently(t *testing.T, s store.Store, keys []string) {
	t.Helper()
	ch := make(chan string)
	errs := make(chan error, len(keys))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range ch {
				data := []byte(k)
				_, err := s.Put(t.Context(), k, bytes.NewReader(data), int64(len(data)), store.PutOptions{CRC32C: store.CRC32C(data)})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for _, k := range keys {
		ch <- k
	}
	close(ch)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("put: %v", err)
	}
}

func testDelete(t *testing.T, s store.Store) {
	MustPut(t, s, "d", []byte("x"))
	MustPut(t, s, "d2", []byte("y"))
	if err := s.Delete(t.Context(), "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(t.Context(), "d"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Head after Delete: %v, want ErrNotExist", err)
	}
	if keys := listKeys(t, s, "", "", 0); !slices.Equal(keys, []string{"d2"}) {
		t.Errorf("List after Delete = %q", keys)
	}
	if err := s.Delete(t.Context(), "d"); err != nil {
		t.Errorf("Delete of a deleted key: %v, want nil", err)
	}
	if err := s.Delete(t.Context(), "never-was"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
}

func putIfNoneMatch(t *testing.T, s store.Store, key string, data []byte) error {
	_, err := s.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)),
		store.PutOptions{IfNoneMatch: true, CRC32C: store.CRC32C(data)})
	return err
}

func testConditionalCreate(t *testing.T, s store.Store) {
	if err := putIfNoneMatch(t, s, "c", []byte("first")); err != nil {
		t.Fatalf("first create: %v", err)
	}
	err := putIfNoneMatch(t, s, "c", []byte("second"))
	if !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("second create: %v, want ErrPreconditionFailed", err)
	}
	if got := MustGet(t, s, "c", 0, -1); string(got) != "first" {
		t.Errorf("after a failed create the object holds %q, want %q", got, "first")
	}
}

// testConditionalReplace: a Put with IfMatch replaces the object only
// while it still has the ETag Head reported; of two writers that read the
// same ETag exactly one wins.
func testConditionalReplace(t *testing.T, s store.Store) {
	MustPut(t, s, "r", []byte("v1"))
	info, err := s.Head(t.Context(), "r")
	if err != nil {
		t.Fatal(err)
	}
	replace := func(data string) error {
		_, err := s.Put(t.Context(), "r", bytes.NewReader([]byte(data)), int64(len(data)),
			store.PutOptions{IfMatch: info.ETag, CRC32C: store.CRC32C([]byte(data))})
		return err
	}
	if err := replace("v2"); err != nil {
		t.Fatalf("replace with the current ETag: %v", err)
	}
	if err := replace("v3"); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("replace with a stale ETag: %v, want ErrPreconditionFailed", err)
	}
	if got := MustGet(t, s, "r", 0, -1); string(got) != "v2" {
		t.Fatalf("object holds %q, want v2", got)
	}
	_, err = s.Put(t.Context(), "absent", bytes.NewReader([]byte("x")), 1, store.PutOptions{IfMatch: info.ETag})
	if !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("replace of an absent object: %v, want ErrPreconditionFailed or ErrNotExist", err)
	}
}

func testConditionalRace(t *testing.T, s store.Store) {
	const writers = 8
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range writers {
		wg.Go(func() {
			<-start
			errs[i] = putIfNoneMatch(t, s, "race", []byte(fmt.Sprintf("writer %d", i)))
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both created the object", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrPreconditionFailed):
			t.Errorf("writer %d: %v, want nil or ErrPreconditionFailed", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer created the object")
	}
	if got, want := string(MustGet(t, s, "race", 0, -1)), fmt.Sprintf("writer %d", winner); got != want {
		t.Errorf("object holds %q, want the winner's %q", got, want)
	}
}

func testPutCRC32CMismatch(t *testing.T, s store.Store) {
	data := []byte("the body")
	_, err := s.Put(t.Context(), "bad", bytes.NewReader(data), int64(len(data)),
		store.PutOptions{CRC32C: store.CRC32C([]byte("another body"))})
	if err == nil {
		t.Fatal("Put with a wrong CRC32C succeeded")
	}
	if _, err := s.Head(t.Context(), "bad"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Head after a rejected Put: %v, want ErrNotExist", err)
	}
}
