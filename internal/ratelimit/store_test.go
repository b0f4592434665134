package ratelimit

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

// The store wrappers pace one direction each, as lower bounds on time, and
// leave the other alone; the bytes arrive intact either way.
func TestStoreWrappersPaceOneDirection(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("ferry"), (2<<20)/5)
	mem := store.NewMemStore()
	if Uploads(mem, nil) != store.Store(mem) || Downloads(mem, nil) != store.Store(mem) {
		t.Fatal("a nil limiter should return the store itself")
	}
	up := Uploads(mem, New(4<<20)) // 4 MiB/s: 2 MiB take ~450 ms at least
	start := time.Now()
	if _, err := up.Put(ctx, "k", bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Errorf("a 2 MiB Put through Uploads at 4 MiB/s took %v, want at least ~450ms", el)
	}
	if el := timeGet(t, up, data); el > 300*time.Millisecond {
		t.Errorf("a Get through Uploads took %v: reads are not paced by it", el)
	}
	down := Downloads(mem, New(4<<20))
	if el := timeGet(t, down, data); el < 400*time.Millisecond {
		t.Errorf("a 2 MiB Get through Downloads at 4 MiB/s took %v, want at least ~450ms", el)
	}
	start = time.Now()
	if _, err := down.Put(ctx, "k2", bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 300*time.Millisecond {
		t.Errorf("a Put through Downloads took %v: sends are not paced by it", el)
	}
}

// timeGet reads key "k" whole through st, checks its bytes and returns how
// long it took.
func timeGet(t *testing.T, st store.Store, want []byte) time.Duration {
	t.Helper()
	start := time.Now()
	rc, err := st.Get(context.Background(), "k", 0, int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// Reads of 32 KiB, as a copy makes: a body pays for each read once
	// its bytes arrived, so the last read is free.
	var got bytes.Buffer
	if _, err := io.CopyBuffer(struct{ io.Writer }{&got}, rc, make([]byte, 32<<10)); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("Get: %d bytes, %v; want the %d bytes put", got.Len(), err, len(want))
	}
	return time.Since(start)
}
