package restore

import (
	"context"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
)

// An object shorter than the manifest records fails its file at once:
// the clean end of its body is checked with one HEAD, which says the
// object is short, so the range is not asked again (it was, three times
// with pauses, 0.6 s, as for a body cut by the network), and the error
// gives the object's size.
func TestTruncatedObjectFailsAtOnce(t *testing.T) {
	mem := store.NewMemStore()
	data := randBytes(100000, 7)
	m := commit(t, mem, 3, []tfile{{path: "model.pt", data: data}}, nil)
	overwrite(t, mem, m.Files[0].Key, data[:99000])
	st := &hookStore{Store: mem}
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: t.TempDir(), Step: 3})
	if err == nil || !strings.Contains(err.Error(), "object ended") || !strings.Contains(err.Error(), "the object has 99000 bytes, the manifest says 100000") {
		t.Fatalf("restore: %v", err)
	}
	if n := len(st.gets(m.Files[0].Key)); n != 1 {
		t.Errorf("%d GETs of the truncated object, want 1", n)
	}
}
