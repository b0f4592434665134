package store_test

import (
	"fmt"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

func TestMemStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemStore() })
}

// TestPrefixed: the view the suite runs in against a real endpoint's shared
// bucket passes the suite, and keeps to its prefix.
func TestPrefixed(t *testing.T) {
	mem := store.NewMemStore()
	storetest.MustPut(t, mem, "outside", []byte("x"))
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++
		return storetest.Prefixed(mem, fmt.Sprintf("run/%d/", n))
	})
	if err := storetest.Clear(t.Context(), mem, "run/"); err != nil {
		t.Fatal(err)
	}
	var left []string
	_ = mem.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error { left = append(left, o.Key); return nil })
	if len(left) != 1 || left[0] != "outside" {
		t.Errorf("after the suite and Clear the store holds %q, want only the key outside the prefix", left)
	}
}
