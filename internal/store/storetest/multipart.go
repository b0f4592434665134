package storetest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
)

func testMultipart(t *testing.T, s store.Store, o options) {
	const key = "big/object"
	sizes := []int{store.MinPartSize, store.MinPartSize, 1<<20 + 123}
	var data []byte
	var chunks [][]byte
	for i, n := range sizes {
		c := RandomBytes(uint64(10+i), n)
		chunks = append(chunks, c)
		data = append(data, c...)
	}
	id, err := s.CreateMultipart(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	// Upload out of order, as concurrent uploaders do.
	parts := make([]store.Part, len(chunks))
	for _, i := range []int{2, 0, 1} {
		c := chunks[i]
		p, err := s.UploadPart(t.Context(), key, id, int32(i+1), bytes.NewReader(c), int64(len(c)), store.CRC32C(c))
		if err != nil {
			t.Fatalf("upload part %d: %v", i+1, err)
		}
		if p.Number != int32(i+1) || p.Size != int64(len(c)) || p.ETag == "" || p.CRC32C != store.CRC32C(c) {
			t.Errorf("UploadPart returned %+v", p)
		}
		parts[i] = p
	}
	listed := checkListedParts(t, s, key, id, parts, o)
	if _, err := s.Head(t.Context(), key); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Head before completion: %v, want ErrNotExist", err)
	}
	info, err := s.CompleteMultipart(t.Context(), key, id, listed)
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != key || info.Size != int64(len(data)) || info.ETag == "" {
		t.Errorf("CompleteMultipart returned %+v", info)
	}
	if got := MustGet(t, s, key, 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("completed object: got %d bytes that differ from the %d uploaded", len(got), len(data))
	}
	off := int64(store.MinPartSize - 10)
	if got := MustGet(t, s, key, off, 20); !bytes.Equal(got, data[off:off+20]) {
		t.Error("range across a part boundary differs")
	}
	head, err := s.Head(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if head.Size != int64(len(data)) {
		t.Errorf("Head size %d, want %d", head.Size, len(data))
	}
	if _, err := s.ListParts(t.Context(), key, id); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("ListParts of a completed upload: %v, want ErrNotExist", err)
	}
	ups, err := s.ListUploads(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 0 {
		t.Errorf("ListUploads after completion = %+v", ups)
	}
}

// checkListedParts checks that ListParts of an upload in progress returns
// the parts uploaded, and returns the list to complete it with.
func checkListedParts(t *testing.T, s store.Store, key, id string, parts []store.Part, o options) []store.Part {
	t.Helper()
	listed, err := s.ListParts(t.Context(), key, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(parts) {
		t.Fatalf("ListParts returned %d parts, want %d", len(listed), len(parts))
	}
	unlisted := 0
	for i, p := range listed {
		want := parts[i]
		if p.CRC32C == "" && want.CRC32C != "" && o.partChecksumsOptional {
			// What ferry does with such a part: send it again, and
			// complete with the CRC32C of what it sent.
			unlisted++
			listed[i] = want
			continue
		}
		if p.Number != want.Number || p.Size != want.Size || p.ETag != want.ETag || p.CRC32C != want.CRC32C {
			t.Errorf("ListParts part %d = %+v, want %+v", i, p, want)
		}
	}
	if unlisted > 0 {
		t.Logf("ListParts reported no CRC32C for %d of %d parts (PartChecksumsOptional)", unlisted, len(listed))
	}
	return listed
}

func testPartCRC32CMismatch(t *testing.T, s store.Store) {
	const key = "badpart"
	id, err := s.CreateMultipart(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer s.AbortMultipart(t.Context(), key, id)
	data := RandomBytes(20, 1000)
	if _, err := s.UploadPart(t.Context(), key, id, 1, bytes.NewReader(data), int64(len(data)), store.CRC32C(data[1:])); err == nil {
		t.Fatal("UploadPart with a wrong CRC32C succeeded")
	}
	parts, err := s.ListParts(t.Context(), key, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 0 {
		t.Errorf("ListParts after a rejected part = %+v", parts)
	}
}

func testAbortAndListUploads(t *testing.T, s store.Store) {
	id, err := s.CreateMultipart(t.Context(), "up/one")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.CreateMultipart(t.Context(), "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	data := RandomBytes(30, 100)
	if _, err := s.UploadPart(t.Context(), "up/one", id, 1, bytes.NewReader(data), int64(len(data)), store.CRC32C(data)); err != nil {
		t.Fatal(err)
	}
	ups, err := s.ListUploads(t.Context(), "up/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].Key != "up/one" || ups[0].UploadID != id || ups[0].Initiated.IsZero() {
		t.Fatalf("ListUploads(up/) = %+v, want the one upload %s", ups, id)
	}
	if ups, err := s.ListUploads(t.Context(), ""); err != nil || len(ups) != 2 {
		t.Errorf("ListUploads() = %+v, %v; want 2 uploads", ups, err)
	}
	if err := s.AbortMultipart(t.Context(), "up/one", id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListParts(t.Context(), "up/one", id); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("ListParts of an aborted upload: %v, want ErrNotExist", err)
	}
	if err := s.AbortMultipart(t.Context(), "up/one", id); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("second abort: %v, want ErrNotExist", err)
	}
	if _, err := s.UploadPart(t.Context(), "up/one", id, 2, bytes.NewReader(data), int64(len(data)), store.CRC32C(data)); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("UploadPart to an aborted upload: %v, want ErrNotExist", err)
	}
	ups, err = s.ListUploads(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 1 || ups[0].UploadID != other {
		t.Errorf("ListUploads after abort = %+v, want only %s", ups, other)
	}
	if err := s.AbortMultipart(t.Context(), "elsewhere", other); err != nil {
		t.Fatal(err)
	}
}
