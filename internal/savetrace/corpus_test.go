package savetrace

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
)

// TestTraces parses every trace of the repository: the frameworks' traces
// (testdata/saveorders, none is fine) and the replay's development
// samples (agent/testdata/savetrace). Any invalid one fails, naming its
// file and line; each must name a layout the agent has.
func TestTraces(t *testing.T) {
	total := 0
	for _, dir := range []string{"../../testdata/saveorders", "../../agent/testdata/savetrace"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.trace"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			tr, err := ParseFile(f)
			if err != nil {
				t.Error(err)
				continue
			}
			if !slices.Contains(detect.LayoutNames(), tr.Layout) {
				t.Errorf("%s: layout %q is not one of ferry's (%v)", f, tr.Layout, detect.LayoutNames())
			}
			total++
		}
		t.Logf("%s: %d traces", dir, len(files))
	}
	if total == 0 {
		t.Log("no traces yet")
	}
}
