package verify

import (
	"fmt"
	"testing"

	"github.com/ferrylabs/ferry/manifest"
)

// --read-data-subset picks files until their bytes reach the share, at
// least one file, never one twice; all of them at 100%.
func TestChooseShare(t *testing.T) {
	var files []manifest.File
	var total int64
	for i := range 50 {
		f := manifest.File{Path: fmt.Sprint("f", i), Size: int64(1000 * (i + 1))}
		files = append(files, f)
		total += f.Size
	}
	for _, share := range []float64{0.001, 0.1, 0.5, 0.99} {
		for range 20 {
			got := choose(files, share)
			seen := map[string]bool{}
			var bytes int64
			for _, f := range got {
				if seen[f.Path] {
					t.Fatalf("share %v: %s chosen twice", share, f.Path)
				}
				seen[f.Path] = true
				bytes += f.Size
			}
			if len(got) == 0 || float64(bytes) < share*float64(total) {
				t.Fatalf("share %v: %d files, %d of %d bytes", share, len(got), bytes, total)
			}
		}
	}
	if got := choose(files, 1); len(got) != len(files) {
		t.Errorf("share 1: %d files, want all %d", len(got), len(files))
	}
}
