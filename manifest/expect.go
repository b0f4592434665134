package manifest

import (
	"errors"
	"fmt"
	"sort"
)

// ErrNotAsRecorded is wrapped by CheckExpected's errors: the files
// disagree with the framework's own record of the step. Retrying cannot
// help (a part, once written, is immutable); the trainer's next save can.
var ErrNotAsRecorded = errors.New("not committed: the step's files disagree with its framework's record")

// Expected is one file a framework's own record of the step names, with
// the size the record gives it (DCP's .metadata: the end of the file's
// last item). A node of a multi-node job sees only its own files but the
// whole record, so its part carries the record's expectations and the
// merge checks the union of the parts against them (CheckExpected).
type Expected struct {
	// Path is the file's path, relative to the checkpoint root.
	Path string `json:"path"`
	// Size is the size the record gives the file.
	Size int64 `json:"size"`
	// Record is the record's own path, relative to the checkpoint root.
	Record string `json:"record"`
}

// MaxExpected caps a part's expectations, as the file count caps its files.
const MaxExpected = MaxFiles

func validateExpected(exp []Expected) error {
	if len(exp) > MaxExpected {
		return fmt.Errorf("part manifest field expect: %d entries, more than %d", len(exp), MaxExpected)
	}
	for i, e := range exp {
		if err := checkPath(e.Path); err != nil {
			return fmt.Errorf("part manifest field expect[%d].path: %w", i, err)
		}
		if err := checkPath(e.Record); err != nil {
			return fmt.Errorf("part manifest field expect[%d].record: %w", i, err)
		}
		if e.Size < 0 {
			return fmt.Errorf("part manifest field expect[%d].size: %d is negative", i, e.Size)
		}
	}
	return nil
}

// CheckExpected reports the first way the files disagree with what the
// framework's record says the step holds: a file it names that is missing,
// or one of another size, or two records giving one file different sizes.
// nil when every expected file is there with its size.
func CheckExpected(step int64, files []File, exp []Expected) error {
	if len(exp) == 0 {
		return nil
	}
	have := make(map[string]int64, len(files))
	for _, f := range files {
		have[f.Path] = f.Size
	}
	want := map[string]Expected{}
	for _, e := range exp {
		if o, dup := want[e.Path]; dup && o.Size != e.Size {
			return fmt.Errorf("step %d: %s and %s give %s different sizes (%d and %d bytes): %w", step, o.Record, e.Record, e.Path, o.Size, e.Size, ErrNotAsRecorded)
		}
		want[e.Path] = e
	}
	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		e := want[p]
		size, ok := have[p]
		switch {
		case !ok:
			return fmt.Errorf("step %d: %s names %s, which no node uploaded: %w", step, e.Record, p, ErrNotAsRecorded)
		case size != e.Size:
			return fmt.Errorf("step %d: %s is %d bytes, %s records %d (a torn or rewritten file): %w", step, p, size, e.Record, e.Size, ErrNotAsRecorded)
		}
	}
	return nil
}
