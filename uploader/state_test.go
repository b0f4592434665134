package uploader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Changes recorded from many goroutines at once all reach the file: each
// save writes a snapshot unless a newer one, holding its change, is on
// disk already. A reopened state holds every part's digest.
func TestStateConcurrentSaves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "push.json")
	newAttempt := func() string { return "a1" }
	st, err := openResumeState(path, "owner", newAttempt)
	if err != nil {
		t.Fatal(err)
	}
	const files, parts = 4, 50
	for f := range files {
		if err := st.Put(fmt.Sprint("key", f), pendingUpload{UploadID: fmt.Sprint("id", f), PartSize: 8 << 20, Early: true}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for f := range files {
		for n := range parts {
			wg.Go(func() {
				if err := st.PutEarlyPart(fmt.Sprint("key", f), int32(n+1), fmt.Sprint("d", f, "-", n), sentPart{ETag: fmt.Sprint("e", n)}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	again, err := openResumeState(path, "owner", newAttempt)
	if err != nil {
		t.Fatal(err)
	}
	for f := range files {
		up, ok := again.Get(fmt.Sprint("key", f))
		if !ok || up.UploadID != fmt.Sprint("id", f) || len(up.Digests) != parts || len(up.Sent) != parts {
			t.Fatalf("reopened upload %d: %+v, %v; want %d digests", f, up, ok, parts)
		}
		for n := range parts {
			if want := fmt.Sprint("d", f, "-", n); up.Digests[int32(n+1)] != want {
				t.Errorf("upload %d part %d digest %q, want %q", f, n+1, up.Digests[int32(n+1)], want)
			}
		}
	}
}

// A save racing the delete that ends a push never leaves the state file
// behind: once Delete returned, a save whose snapshot was taken before it,
// or one taken after it, writes nothing (the push is over, and a file
// left there would be read by the next push of the step as its own).
func TestStateDeleteRacingSave(t *testing.T) {
	for i := range 50 {
		path := filepath.Join(t.TempDir(), "push.json")
		st, err := openResumeState(path, "owner", func() string { return "a1" })
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Put("key", pendingUpload{UploadID: "id", PartSize: 8 << 20}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if err := st.Save(); err != nil {
					t.Error(err)
				}
			})
		}
		if err := st.Delete(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("run %d: state file after Delete and the saves returned: %v; want it gone", i, err)
		}
	}
}
