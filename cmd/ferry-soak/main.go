// Command ferry-soak drives a real `ferry agent` through thousands of
// checkpoint steps against a local versitygw and reports, every -every
// steps, the agent's RSS, descriptors, goroutines, inotify watches and
// state size (internal/soak). It exits 1 when a target is missed.
//
//	make soak                  # 5,000 steps (SOAK_STEPS)
//	ferry-soak -ferry bin/ferry -versitygw tools/bin/versitygw -steps 600 -every 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/internal/soak"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-soak:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	cfg := soak.Defaults()
	fs := flag.NewFlagSet("ferry-soak", flag.ContinueOnError)
	ferry := fs.String("ferry", "bin/ferry", "the ferry `binary` to soak")
	gw := fs.String("versitygw", "tools/bin/versitygw", "the versitygw `binary` to serve S3")
	dir := fs.String("dir", "", "work `folder` (default: a new temporary one, removed when the run passes)")
	fs.IntVar(&cfg.Steps, "steps", cfg.Steps, "steps to save")
	fs.IntVar(&cfg.Every, "every", cfg.Every, "steps between samples")
	fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "time between two saves")
	fs.IntVar(&cfg.LargeEvery, "large-every", cfg.LargeEvery, "every Nth step is large")
	fs.IntVar(&cfg.LargeSize, "large-size", cfg.LargeSize, "bytes of each rank file of a large step")
	fs.IntVar(&cfg.DeleteEvery, "delete-every", cfg.DeleteEvery, "every Nth step is deleted by the trainer right after it is saved (0: none)")
	fs.IntVar(&cfg.PruneEvery, "prune-every", cfg.PruneEvery, "run ferry prune every N steps (0: never)")
	fs.IntVar(&cfg.KeepLocal, "keep-local", cfg.KeepLocal, "the agent's --keep-local")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, p := range []*string{ferry, gw} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("%s not found: build it first (make build tools) or name it with -ferry / -versitygw", abs)
		}
		*p = abs
	}
	work := *dir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "ferry-soak-"); err != nil {
			return err
		}
	}
	srv, err := soak.StartVersitygw(*gw, work)
	if err != nil {
		return err
	}
	defer srv.Stop()
	if err := srv.CreateBucket(ctx, "soak"); err != nil {
		return err
	}
	cfg.Ferry, cfg.Env, cfg.To, cfg.Dir, cfg.Progress = *ferry, srv.Env(), "s3://soak/run", work, os.Stdout
	// FERRY_* settings of the caller reach the agent: a soak of other
	// settings than the defaults (FERRY_PART_SIZE=8MiB make soak).
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FERRY_") {
			cfg.Env = append(cfg.Env, kv)
		}
	}
	fmt.Printf("ferry-soak %s: %d steps every %v, sampled every %d, in %s\n",
		time.Now().UTC().Format(time.RFC3339), cfg.Steps, cfg.Interval, cfg.Every, work)
	res, err := soak.Run(ctx, cfg)
	if res != nil {
		fmt.Println()
		soak.WriteTable(os.Stdout, res.Samples)
		fmt.Printf("\n%d prunes; agent log: %s\n", res.Prunes, res.Log)
	}
	if err != nil {
		return err
	}
	if fails := soak.Check(res.Samples, soak.DefaultTargets(cfg.Steps, cfg.Every)); len(fails) > 0 {
		return fmt.Errorf("targets missed (work dir kept: %s):\n  %s", work, strings.Join(fails, "\n  "))
	}
	fmt.Println("all targets met")
	if *dir == "" {
		srv.Stop()
		return os.RemoveAll(work)
	}
	return nil
}
