package agent

import (
	"strings"
	"testing"
)

// A revision never loses data: files deleted on disk with the rest
// unchanged are a cleanup, not a save; deleted and changed without a
// marker, nothing says the new set is complete; with a fresh marker (the
// detector requires it newer than the changed files) it is a re-save.
func TestRevisionLoses(t *testing.T) {
	f := func(p string, size, mtime int64) localFile { return localFile{Path: p, Size: size, ModTime: mtime} }
	committed := []localFile{f("s/.metadata", 10, 5), f("s/__0_0.distcp", 100, 3), f("s/__1_0.distcp", 100, 4)}
	for _, c := range []struct {
		name   string
		now    []localFile
		marker string
		want   string // "" publishes
		warn   bool
	}{
		{"a cleanup deleted a shard", committed[:2], ".metadata", "were deleted on disk", false},
		{"deleted and changed, no marker", []localFile{f("s/__0_0.distcp", 120, 9)}, "", "no marker", true},
		{"re-saved with fewer ranks, marker rewritten", []localFile{f("s/.metadata", 11, 9), f("s/__0_0.distcp", 130, 8)}, ".metadata", "", false},
		{"a file changed, none deleted", []localFile{committed[0], f("s/__0_0.distcp", 100, 9), committed[2]}, "", "", false},
		{"a file added", append(committed[:3:3], f("s/extra", 1, 9)), "", "", false},
	} {
		why, warn := revisionLoses(committed, c.now, c.marker)
		if c.want == "" && why != "" || c.want != "" && !strings.Contains(why, c.want) || warn != c.warn {
			t.Errorf("%s: %q warn %v, want %q warn %v", c.name, why, warn, c.want, c.warn)
		}
	}
}
