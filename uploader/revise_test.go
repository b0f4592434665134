package uploader

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
)

// A step committed early (one file of two) and then completed on disk:
// without Revise the push refuses to overwrite; with it the complete
// version becomes the step's revision 1, the unchanged file is not sent
// again, and every object the revision names holds the final bytes.
func TestPushReviseCommittedStep(t *testing.T) {
	st := store.NewMemStore()
	dir := t.TempDir()
	model := writeRandom(t, filepath.Join(dir, "model.pt"), 3*testPart, 1)
	if res, err := push(t, st, dir, 10, t.TempDir(), nil); err != nil || !res.Committed {
		t.Fatalf("early push: %+v %v", res, err)
	}
	optim := writeRandom(t, filepath.Join(dir, "optim.pt"), testPart+7, 2)
	header := writeRandom(t, filepath.Join(dir, "header.bin"), 100, 3)

	if _, err := push(t, st, dir, 10, t.TempDir(), nil); !errors.Is(err, remote.ErrConflict) {
		t.Fatalf("push without Revise: %v, want ErrConflict", err)
	}
	res, err := push(t, st, dir, 10, t.TempDir(), func(c *pushCase) { c.Revise = true })
	if err != nil || !res.Committed || res.Manifest.Revision != 1 {
		t.Fatalf("push with Revise: %+v %v", res, err)
	}
	if sent := res.Stats.BytesSent; sent != int64(len(optim)+len(header)) {
		t.Errorf("revision sent %d bytes, want %d (the unchanged model deduplicated)", sent, len(optim)+len(header))
	}
	m, err := remote.Get(t.Context(), st, "run", 10)
	if err != nil || m.Revision != 1 || len(m.Files) != 3 {
		t.Fatalf("committed after revise: %+v %v", m, err)
	}
	want := map[string][]byte{"model.pt": model, "optim.pt": optim, "header.bin": header}
	for _, f := range m.Files {
		if got := readObject(t, st, f.Key); !bytes.Equal(got, want[f.Path]) || f.BLAKE3 != b3(want[f.Path]) {
			t.Errorf("%s: object %s does not hold the final bytes", f.Path, f.Key)
		}
	}
	// Pushed again unchanged: nothing to do.
	res, err = push(t, st, dir, 10, t.TempDir(), func(c *pushCase) { c.Revise = true })
	if err != nil || res.Committed {
		t.Fatalf("push of the revised content again: %+v %v", res, err)
	}
}
