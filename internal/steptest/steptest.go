// Package steptest commits folders as checkpoint steps, as `ferry push`
// does (detect.Gather, then uploader's Push), for the tests of the
// packages that read what a push wrote: copy, verify, peer, restore. For
// steps a push does not make (packs with gaps, damaged packs, entries
// shared across steps) it lays out packs by hand (Pack, Entry, Put), one
// builder for the tests of verify, prune, restore and copy.
package steptest

import (
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

// Gather is the step `ferry push DIR` makes of dir, numbered n.
func Gather(t testing.TB, dir string, n int64) detect.Step {
	t.Helper()
	s, _, err := detect.Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Number = n
	return s
}

// Push commits the files under dir as step n under prefix in st and
// returns the committed manifest.
func Push(t testing.TB, st store.Store, prefix, dir string, n int64, opts uploader.PushOptions) *manifest.Manifest {
	t.Helper()
	dest := uploader.Destination{Store: st, Location: "s3://b/" + prefix, Prefix: prefix}
	res, err := dest.Push(t.Context(), Gather(t, dir, n), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res.Manifest
}
