package s3proxy_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

// TestLostCommitResponse lets the server store the manifest, then resets
// the connection before the answer: the SDK retries the create-only PUT,
// which finds the manifest there (412). The step is committed by this very
// push, so its data objects must survive and restore must work.
func TestLostCommitResponse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{{
		Ops: []string{s3proxy.OpPutObject}, KeyPrefix: manifest.ManifestsPrefix("run"), Times: 1,
		Action: s3proxy.ResetBeforeResponse(),
	}}})
	src := t.TempDir()
	data := randomBytes(8, 6*mib)
	writeFile(t, filepath.Join(src, "model.pt"), data)
	s, _, err := detect.Gather([]string{src}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Number = 3
	dest := uploader.Destination{Store: f.store(t), Location: "s3://test/run", Prefix: "run"}
	res, pushErr := dest.Push(t.Context(), s, uploader.PushOptions{Upload: uploader.Options{PartSize: 5 * mib}})
	t.Logf("push: committed %v, error %v", res.Committed, pushErr)
	for _, r := range f.px.Requests() {
		if r.Op == s3proxy.OpPutObject || r.Op == s3proxy.OpDeleteObject {
			t.Logf("  %v", r)
		}
	}
	dst := t.TempDir()
	_, err = restore.Restore(t.Context(), restore.Options{Store: f.direct(t), Prefix: "run", Dir: dst, Step: 3})
	if err != nil {
		t.Fatalf("restore of the step the push committed: %v", err)
	}
	sameFile(t, filepath.Join(dst, "model.pt"), data)
	if errors.Is(pushErr, remote.ErrConflict) {
		t.Error("push reported a conflict with its own manifest")
	}
}
