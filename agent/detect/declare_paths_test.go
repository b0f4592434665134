package detect

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Issue 47 item 4: with a link r -> (a folder outside) planted in the watch
// dir, `ferry commit` named r/secret/key.pem and r/secret/nokey.pem: the
// first was taken (resolved with the agent's rights, through the link)
// and the second answered "no such file", telling the caller what exists
// where it cannot look. Both, and a plain missing path, now get the same
// answer; the path is looked up through the confinement.
func TestDeclareLinkProbeAnswersAlike(t *testing.T) {
	watch, outside := t.TempDir(), t.TempDir()
	write(t, outside, "secret/key.pem", "private key")
	write(t, watch, "step-1/model.bin", "weights")
	symlink(t, watch, "r", outside)
	symlink(t, watch, "step-1/link", filepath.Join(outside, "secret"))
	w := newWatcher(t, Options{Dir: watch, Layout: "auto"})
	answer := func(p string) string {
		err := w.Declare(1, []string{p})
		if err == nil {
			return "taken"
		}
		return strings.Replace(err.Error(), p, "PATH", 1)
	}
	want := answer("r/secret/nokey.pem")
	for _, p := range []string{"r/secret/key.pem", "r/secret", "step-1/link/key.pem", "step-1/link/nokey.pem", "nothing/here.pem"} {
		if got := answer(p); got != want {
			t.Errorf("%s: %q, want %q as for a path that does not exist", p, got, want)
		}
	}
	if want == "taken" {
		t.Error("a path through a link was taken")
	}
	if got := answer("step-1/model.bin"); got != "taken" {
		t.Errorf("a real file: %s", got)
	}
}

// Paths named again, or below a folder also named, fold into one.
func TestFoldPaths(t *testing.T) {
	got := foldPaths([]string{"a/b", "a-x", "a", "c/d", "a/b/c", "c/d", "a-x/y", "c/de"})
	if want := []string{"a", "a-x", "c/d", "c/de"}; !slices.Equal(got, want) {
		t.Errorf("folded %v, want %v", got, want)
	}
}

// Issue 46 item 6: `ferry commit --step 201 step-200/...` committed the
// folder as step 201 without a word; a declaration whose folder is named
// as another step is refused, naming both numbers.
func TestDeclareNamedAsOtherStep(t *testing.T) {
	watch := t.TempDir()
	write(t, watch, "step-200/model.bin", "weights")
	write(t, watch, "run-a/model.bin", "weights")
	w := newWatcher(t, Options{Dir: watch, Layout: "auto"})
	err := w.Declare(201, []string{"step-200/model.bin"})
	if err == nil || !strings.Contains(err.Error(), "step-200 is named as step 200, not 201") {
		t.Fatalf("step-200 declared as 201: %v", err)
	}
	if err := w.Declare(200, []string{"step-200"}); err != nil {
		t.Fatalf("step-200 declared as 200: %v", err)
	}
	if err := w.Declare(7, []string{"run-a/model.bin"}); err != nil {
		t.Fatalf("a folder not named as a step: %v", err)
	}
	p := newWatcher(t, Options{Dir: watch, Layout: "auto", StepPattern: `^run-(\d+)$`})
	if err := p.Declare(201, []string{"step-200/model.bin"}); err != nil {
		t.Fatalf("with a step pattern that does not read step-200: %v", err)
	}
}
