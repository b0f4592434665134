package detect

import (
	"strings"
	"testing"
)

// TestUnrecordableNameHoldsStep: a file whose name a manifest cannot
// record (a newline, a backslash) holds its step before anything is sent,
// with the reason, instead of every byte being uploaded and the manifest
// refused at the commit.
func TestUnrecordableNameHoldsStep(t *testing.T) {
	for _, bad := range []string{"notes\nv2.txt", `win\path.bin`} {
		dir := t.TempDir()
		write(t, dir, "checkpoint-100/model.safetensors", "x")
		write(t, dir, "checkpoint-100/"+bad, "y")
		write(t, dir, "checkpoint-100/trainer_state.json", "{}")
		write(t, dir, "checkpoint-200/model.safetensors", "x")
		write(t, dir, "checkpoint-200/trainer_state.json", "{}")
		age(t, dir)
		w := newWatcher(t, Options{Dir: dir, Layout: "hf"})
		steps, err := w.Scan()
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != 1 || steps[0].Number != 200 {
			t.Fatalf("%q: scan found %v, want step 200 alone", bad, describeAll(steps))
		}
		e, err := newEngine(w.opts, w.openCheck)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rescan(nil); err != nil {
			t.Fatal(err)
		}
		for _, c := range e.candidates() {
			if c.Step.Number == 100 {
				if why := e.blocked(&c); !strings.HasPrefix(why, "name ") || !strings.Contains(why, "cannot record") {
					t.Errorf("%q: step 100 blocked by %q", bad, why)
				}
			}
		}
	}
}
