package uploader

import (
	"fmt"
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
	st, err := OpenState(path, "owner", newAttempt)
	if err != nil {
		t.Fatal(err)
	}
	const files, parts = 4, 50
	for f := range files {
		if err := st.Put(fmt.Sprint("key", f), Upload{UploadID: fmt.Sprint("id", f), PartSize: 8 << 20, Early: true}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for f := range files {
		for n := range parts {
			wg.Go(func() {
				if err := st.PutEarlyPart(fmt.Sprint("key", f), int32(n+1), fmt.Sprint("d", f, "-", n), SentPart{ETag: fmt.Sprint("e", n)}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	again, err := OpenState(path, "owner", newAttempt)
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
