// Package scale runs ferry's multi-node commit, restore planning, big
// manifests and long histories in one process against the in-memory store
// with a latency per request like R2's, and reports requests, time and
// cost. cmd/ferry-scale is its command and `make scale` runs it; see the
// Scale section of docs/performance.md.
package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Options says what Run simulates.
type Options struct {
	Nodes         []int           // node counts of the commit phase
	Spreads       []time.Duration // windows within which the nodes finish
	Latency       time.Duration   // latency of every request
	ManifestFiles []int           // file counts of the big-manifest phase
	History       int             // committed steps of the history phase (0: skip)
	Out           string          // also write the report as JSON to this file
}

type report struct {
	Date      string           `json:"date"`
	Latency   time.Duration    `json:"latency_ns"`
	Commits   []commitResult   `json:"commits"`
	Manifests []manifestResult `json:"manifests"`
	History   *historyResult   `json:"history,omitempty"`
}

// Run runs every phase, logs each result to stderr and prints the report
// as Markdown to stdout.
func Run(ctx context.Context, o Options) error {
	latency := o.Latency
	rep := report{Date: time.Now().UTC().Format(time.RFC3339), Latency: latency}
	for _, n := range o.Nodes {
		for _, s := range o.Spreads {
			dir, err := os.MkdirTemp("", "ferry-scale-")
			if err != nil {
				return err
			}
			r, err := simulateCommit(ctx, dir, n, s, latency)
			os.RemoveAll(dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "commit: %d nodes, spread %v: %d part GETs, %d merges, commit %v after the last part\n",
				n, s, r.PartGets, r.Merges, r.CommitLatency.Round(time.Millisecond))
			rep.Commits = append(rep.Commits, r)
		}
	}
	for _, f := range o.ManifestFiles {
		dir, err := os.MkdirTemp("", "ferry-scale-")
		if err != nil {
			return err
		}
		r := measureManifest(ctx, dir, f, latency)
		os.RemoveAll(dir)
		fmt.Fprintf(os.Stderr, "manifest: %d files: %d bytes, decode %v %s\n", f, r.Bytes, r.Decode.Round(time.Millisecond), r.Error)
		rep.Manifests = append(rep.Manifests, r)
	}
	if o.History > 0 {
		h, err := measureHistory(ctx, o.History, latency)
		if err != nil {
			return err
		}
		rep.History = &h
	}
	fmt.Print(rep.markdown())
	if o.Out != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		return os.WriteFile(o.Out, append(data, '\n'), 0o644)
	}
	return nil
}
