// Package doctor checks, before a job starts, everything `ferry agent`
// needs from its surroundings: the endpoint and TLS, credentials, the
// bucket, permissions under the prefix (PUT, GET, LIST, DELETE, a multipart
// upload of equal parts), conditional writes, the clock against the
// server's, the watch dir (the layout the agent would see there and what
// would complete a step, the filesystem, inotify limits, read leases), the
// state dir and free space. Each check gives one Result: ok, warn or fail
// with the fix. It leaves nothing behind in the bucket: every object it
// writes is deleted again, and a failed delete is itself reported.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/storecheck"
)

// Status is a check's outcome.
type Status string

// The outcomes, worst last.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	// Skip: not checked, because a check it depends on failed.
	Skip Status = "skip"
)

// Result is one check's outcome: what was found, and for a warning or a
// failure, what to do.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

func ok(check, format string, args ...any) Result {
	return Result{Check: check, Status: OK, Detail: oneLine(fmt.Sprintf(format, args...))}
}

func warn(check, fix, format string, args ...any) Result {
	return Result{Check: check, Status: Warn, Detail: oneLine(fmt.Sprintf(format, args...)), Fix: fix}
}

func fail(check, fix, format string, args ...any) Result {
	return Result{Check: check, Status: Fail, Detail: oneLine(fmt.Sprintf(format, args...)), Fix: fix}
}

func skip(check, why string) Result { return Result{Check: check, Status: Skip, Detail: why} }

// Config is what the agent would be started with.
type Config struct {
	// Endpoint is the resolved endpoint URL, "" for AWS S3.
	Endpoint string
	Region   string
	Bucket   string
	Prefix   string
	// Store opens the bucket (or folder) as the agent would.
	Store store.Store
	// Credentials returns where the store's credentials come from; nil
	// for a folder (file://), which has no endpoint and no credentials.
	Credentials func(context.Context) (string, error)
	// CABundle is AWS_CA_BUNDLE, for the endpoint's TLS check.
	CABundle string
	// Detect is the agent's detection options (the watch dir among them).
	Detect detect.Options
	// StateDir is the base state dir.
	StateDir string
	// Cache records a conditional-write proof for the agent to reuse.
	Cache storecheck.Cache
	// MultipartSize is the part size of the multipart check (at least
	// store.MinPartSize; 0 means that).
	MultipartSize int64
	// ControlGroup is --control-group ("" without it), and ControlCheck
	// what the agent will check of it as it starts.
	ControlGroup string
	ControlCheck func() error
}

// Failed reports whether any result is a failure.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// PrintText writes one line per result: its status, the check, what was
// found and, after "fix:", what to do.
func PrintText(w io.Writer, rs []Result) error {
	return printText(w, rs, false)
}

// PrintProblems writes only the checks that warned or failed, one line
// each as PrintText does: nothing at all when every check passed. It is
// doctor --quiet, for job scripts that run it on every node.
func PrintProblems(w io.Writer, rs []Result) error {
	return printText(w, rs, true)
}

func printText(w io.Writer, rs []Result, problemsOnly bool) error {
	for _, r := range rs {
		if problemsOnly && r.Status != Warn && r.Status != Fail {
			continue
		}
		line := fmt.Sprintf("%-4s %s: %s", r.Status, r.Check, oneLine(r.Detail))
		if r.Fix != "" {
			line += "; fix: " + oneLine(r.Fix)
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// PrintJSON writes the results as one JSON document.
func PrintJSON(w io.Writer, rs []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		OK     bool     `json:"ok"`
		Checks []Result `json:"checks"`
	}{!Failed(rs), rs})
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
