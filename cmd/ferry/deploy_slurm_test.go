package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const slurmScript = "../../deploy/slurm/ferry-train.sbatch"

// The SLURM template's own_dir, run as each node runs it: a new folder is
// made mode 0700; an existing one is used only if it is this user's, not a
// link and writable by this user alone (issue 38 M5: a folder another user
// made first could swap the restored files before torch.load).
func TestSlurmOwnDir(t *testing.T) {
	data, err := os.ReadFile(slurmScript)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)own_dir='(own_dir\(\) \{.*?\n\})'`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no own_dir='...' function in the batch script")
	}
	fn := string(m[1])
	run := func(dir string) (string, error) {
		out, err := exec.Command("bash", "-c", fn+"\nown_dir \"$1\"", "bash", dir).CombinedOutput()
		return string(out), err
	}
	base := t.TempDir()
	fresh := filepath.Join(base, "a", "ckpt")
	if out, err := run(fresh); err != nil {
		t.Fatalf("own_dir on a new path: %v: %s", err, out)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("own_dir made %s with %v (%v), want mode 0700", fresh, fi.Mode(), err)
	}
	if out, err := run(fresh); err != nil {
		t.Errorf("own_dir on its own folder again: %v: %s", err, out)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(fresh, link); err != nil {
		t.Fatal(err)
	}
	refuse := []string{open, link}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(base, "theirs")
		if err := os.Mkdir(theirs, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		refuse = append(refuse, theirs)
	}
	for _, dir := range refuse {
		out, err := run(dir)
		if err == nil || !strings.Contains(out, "refusing") {
			t.Errorf("own_dir %s: %v %q, want a refusal", filepath.Base(dir), err, out)
		}
	}
	// The defaults are such folders, never a predictable /tmp path.
	if !strings.Contains(string(data), "own_dir \"$CKPT_DIR\" && own_dir \"$FERRY_STATE_DIR\"") {
		t.Error("the nodes do not make CKPT_DIR and FERRY_STATE_DIR with own_dir")
	}
	if regexp.MustCompile(`(?m)^export CKPT_DIR=.*ckpt-\$SLURM_JOB_ID\}`).Match(data) {
		t.Error("CKPT_DIR defaults to a predictable name")
	}
}
