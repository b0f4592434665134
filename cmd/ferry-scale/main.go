// Command ferry-scale runs ferry's multi-node commit, restore planning, big
// manifests and long histories in one process against the in-memory store
// with a latency per request like R2's, and reports requests, time and
// cost (internal/bench/scale). `make scale` runs it; see the Scale section
// of docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/bench/scale"
)

func main() {
	nodes := flag.String("nodes", "8,64,512,4096", "node counts to simulate")
	spreads := flag.String("spread", "0s,1s", "windows within which the nodes finish")
	latency := flag.Duration("latency", 30*time.Millisecond, "latency of every request")
	files := flag.String("manifest-files", "100000,1000000", "file counts of the big-manifest phase")
	steps := flag.Int("history", 10000, "committed steps of the history phase (0: skip)")
	out := flag.String("out", "", "also write the report as JSON to this file")
	flag.Parse()
	if err := run(*nodes, *spreads, *files, *steps, *latency, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-scale:", err)
		os.Exit(1)
	}
}

// run converts the flags' lists and runs the simulation.
func run(nodes, spreads, files string, steps int, latency time.Duration, out string) error {
	o := scale.Options{Latency: latency, History: steps, Out: out}
	var err error
	if o.Nodes, err = ints(nodes); err != nil {
		return fmt.Errorf("-nodes: %w", err)
	}
	if o.ManifestFiles, err = ints(files); err != nil {
		return fmt.Errorf("-manifest-files: %w", err)
	}
	for _, s := range strings.Split(spreads, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-spread: %w", err)
		}
		o.Spreads = append(o.Spreads, d)
	}
	return scale.Run(context.Background(), o)
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
