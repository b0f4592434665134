// Command scale runs ferry's multi-node commit, restore planning, big
// manifests and long histories in one process against the in-memory store
// with a latency per request like R2's, and reports requests, time and
// cost. `make scale` runs it; see the Scale section of
// docs/performance.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

type report struct {
	Date      string           `json:"date"`
	Latency   time.Duration    `json:"latency_ns"`
	Commits   []commitResult   `json:"commits"`
	Manifests []manifestResult `json:"manifests"`
	History   *historyResult   `json:"history,omitempty"`
}

func main() {
	nodes := flag.String("nodes", "8,64,512,4096", "node counts to simulate")
	spreads := flag.String("spread", "0s,1s", "windows within which the nodes finish")
	latency := flag.Duration("latency", 30*time.Millisecond, "latency of every request")
	files := flag.String("manifest-files", "100000,1000000", "file counts of the big-manifest phase")
	steps := flag.Int("history", 10000, "committed steps of the history phase (0: skip)")
	out := flag.String("out", "", "also write the report as JSON to this file")
	flag.Parse()
	if err := run(*nodes, *spreads, *files, *steps, *latency, *out); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(nodes, spreads, files string, steps int, latency time.Duration, out string) error {
	ctx := context.Background()
	ns, err := ints(nodes)
	if err != nil {
		return fmt.Errorf("-nodes: %w", err)
	}
	fs, err := ints(files)
	if err != nil {
		return fmt.Errorf("-manifest-files: %w", err)
	}
	var sp []time.Duration
	for _, s := range strings.Split(spreads, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-spread: %w", err)
		}
		sp = append(sp, d)
	}
	rep := report{Date: time.Now().UTC().Format(time.RFC3339), Latency: latency}
	for _, n := range ns {
		for _, s := range sp {
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
	for _, f := range fs {
		dir, err := os.MkdirTemp("", "ferry-scale-")
		if err != nil {
			return err
		}
		r := measureManifest(ctx, dir, f, latency)
		os.RemoveAll(dir)
		fmt.Fprintf(os.Stderr, "manifest: %d files: %d bytes, decode %v %s\n", f, r.Bytes, r.Decode.Round(time.Millisecond), r.Error)
		rep.Manifests = append(rep.Manifests, r)
	}
	if steps > 0 {
		h, err := measureHistory(ctx, steps, latency)
		if err != nil {
			return err
		}
		rep.History = &h
	}
	fmt.Print(rep.markdown())
	if out != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		return os.WriteFile(out, append(data, '\n'), 0o644)
	}
	return nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
