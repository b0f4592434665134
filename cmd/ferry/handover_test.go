package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// TestAgentOnRestoredFolder is the README's "Resume anywhere" recipe
// (issue 46 items 4 and 5): restore the latest step, then start the agent
// on the folder. The restored step is complete to the agent (no "saved
// again after its marker" alarm), is not uploaded again, and `ferry
// status` names it as the last committed step. Each restored file has the
// modification time the writer hashed it under, to the nanosecond, as the
// manifest records it (`ferry show` prints it). Two ways to get there:
//
//   - new_node: a step `ferry push` committed, restored into a new folder,
//     the agent started with a new state folder;
//   - same_node: a step the agent committed itself; the node loses the
//     folder (a wiped NVMe) and restores it in place, and the agent
//     restarted with its own state folder recognises the step its journal
//     holds (paths, sizes, mtimes). Before the times were restored, it took
//     the restored files for a change after the commit, warned and uploaded
//     the step again as a revision;
//   - same_node_kept: the same, the folder intact, as the README's recipe
//     restores at every start: every file is kept and no time changes.
//     Before, restore moved the kept .metadata to its own time, with the
//     same warning and upload at every restart.
func TestAgentOnRestoredFolder(t *testing.T) {
	for _, name := range []string{"new_node", "same_node", "same_node_kept"} {
		t.Run(name, func(t *testing.T) {
			srv := s3test.Shared(t)
			url := "s3://" + srv.NewBucket(t) + "/run"
			env := agentEnv(srv, srv.Endpoint)
			src := t.TempDir()
			stepDir := copyDCPFiles(t, "world2", src, ".metadata", "__0_0.distcp", "__1_0.distcp")
			want := fileTimes(t, stepDir)
			state := t.TempDir()
			agentArgs := func(watch string) []string {
				return []string{"--watch", watch, "--to", url, "--state-dir", state, "--layout", "dcp", "--settle", "300ms", "--metrics-addr", "off"}
			}
			dst := filepath.Join(t.TempDir(), "ckpt")
			if name == "new_node" {
				ferry(t, srv, "push", "--to", url, "--step", "100", src).must(t, 0)
				state = t.TempDir()
			} else {
				ag := startAgentProcess(t, env, agentArgs(src)...)
				waitCommitted(t, state, 100)
				_ = ag.Process.Signal(syscall.SIGTERM)
				if err := ag.Wait(); err != nil {
					t.Fatalf("agent after SIGTERM: %v\n%s", err, ag.logs.String())
				}
				if name == "same_node" {
					if err := os.RemoveAll(stepDir); err != nil {
						t.Fatal(err)
					}
				}
				dst = src
			}
			m := showManifest(t, srv, url)
			for _, f := range m.Files {
				if w := want[filepath.Base(f.Path)]; f.MTime != manifest.TimeOf(w) {
					t.Errorf("manifest records %s at %s, the file was %s", f.Path, f.MTime.Time().Format(time.RFC3339Nano), w.Format(time.RFC3339Nano))
				}
			}

			ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
			for n, got := range fileTimes(t, filepath.Join(dst, "step-100")) {
				if !got.Equal(want[n]) {
					t.Errorf("restored %s has modification time %s, the saved file had %s", n, got.Format(time.RFC3339Nano), want[n].Format(time.RFC3339Nano))
				}
			}
			ag := startAgentProcess(t, env, agentArgs(dst)...)
			waitCommitted(t, state, 100)
			time.Sleep(time.Second) // a settle window and more for any alarm to be raised
			logs := ag.logs.String()
			for _, bad := range []string{"saved again after its marker", "torn", "uploading step", "revision"} {
				if strings.Contains(logs, bad) {
					t.Fatalf("agent on a restored folder logged %q:\n%s", bad, logs)
				}
			}
			if s := statusOf(t, state); len(s.Settling) != 0 {
				t.Errorf("the restored step is still found waiting: %+v", s.Settling)
			}
			if m := showManifest(t, srv, url); m.Revision != 0 {
				t.Errorf("step 100 is at revision %d, want the committed version untouched", m.Revision)
			}
		})
	}
}

// fileTimes returns the modification time of each file in dir, by name.
func fileTimes(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.ModTime()
	}
	return out
}

// showManifest decodes what `ferry show` prints for the latest step.
func showManifest(t *testing.T, srv *s3test.Server, url string) *manifest.Manifest {
	t.Helper()
	r := ferry(t, srv, "show", "--from", url).must(t, 0)
	m, err := manifest.DecodeBytes([]byte(r.stdout), "run")
	if err != nil {
		t.Fatalf("ferry show printed no manifest: %v\n%s", err, r.stdout)
	}
	return m
}

// statusOf is `ferry status --json` of the agent owning state.
func statusOf(t *testing.T, state string) control.Status {
	t.Helper()
	r := ferry(t, nil, "status", "--state-dir", state, "--json")
	var s control.Status
	if r.code != 0 || decodeJSONErr(r.stdout, &s) != nil {
		t.Fatalf("ferry status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return s
}

// waitCommitted waits until the agent owning state says step is its last
// committed one.
func waitCommitted(t *testing.T, state string, step int64) {
	t.Helper()
	waitFor(t, "the agent's status names the step committed", 20*time.Second, func() bool {
		r := ferry(t, nil, "status", "--state-dir", state, "--json")
		var s control.Status
		return r.code == 0 && decodeJSONErr(r.stdout, &s) == nil && s.LastCommitted == step
	})
}
