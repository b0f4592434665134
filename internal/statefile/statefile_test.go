package statefile

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

type doc struct {
	N map[int]bool `json:"n"`
}

// Updates from many goroutines all reach the file: a save skipped because
// a newer snapshot is on disk lost nothing.
func TestConcurrentUpdates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	f := New(path, "test state", doc{N: map[int]bool{}}, false)
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			if err := f.Update(func(d *doc) { d.N[i] = true }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got doc
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.N) != 100 {
		t.Fatalf("file holds %d of 100 updates", len(got.N))
	}
}

// After Delete no save writes the file, while the document stays readable.
func TestDeleteEndsSaves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	f := New(path, "test state", doc{N: map[int]bool{}}, true)
	if err := f.Update(func(d *doc) { d.N[1] = true }); err != nil {
		t.Fatal(err)
	}
	if err := f.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := f.Update(func(d *doc) { d.N[2] = true }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file after Delete: %v; want none", err)
	}
	var n int
	f.View(func(d *doc) { n = len(d.N) })
	if n != 2 {
		t.Fatalf("document holds %d entries, want 2", n)
	}
}
