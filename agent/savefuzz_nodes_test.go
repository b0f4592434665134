package agent

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/uploader"
)

// fuzzNode is one node's agent of a schedule.
type fuzzNode struct {
	a      *Agent
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	left   []int64
	err    error
}

// runAgainstNodes starts one agent per folder of dirs (a node of the job
// each, all on one bucket; one folder: a single node), at the CLI's
// defaults and the options opts sets for node k, runs play (the trainer),
// flushes every node, stops them and returns what the oracle found wrong
// ("" for nothing): each node's flush must answer that all is committed.
func runAgainstNodes(t *testing.T, srv *s3test.Server, f *fz, l fuzzLayout, dirs []string, opts func(k int, o *detect.Options), play func()) string {
	rec := &recordingStore{Store: srv.Store(t, srv.NewBucket(t)), prefix: "run"}
	nodes := make([]*fuzzNode, len(dirs))
	for k, dir := range dirs {
		state, err := os.MkdirTemp("", "fz")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(state)
		det := detect.Options{Dir: dir, Layout: "auto", CloseWrite: true}
		opts(k, &det)
		n := &fuzzNode{reg: prometheus.NewRegistry(), done: make(chan error, 1)}
		o := Options{ // the CLI's defaults (cmd/ferry cmd_agent_flags.go)
			Store: rec, Prefix: "run", URL: "s3://fuzz/run", StateDir: state,
			Detect:   det,
			Pipeline: true, WhenBehind: NewestFirst,
			Upload:  uploader.Options{PartSize: 64 << 20, Concurrency: uploader.DefaultConcurrency, DropCache: true},
			Metrics: control.NewMetrics(n.reg),
			Logger:  zaptest.NewLogger(t).Named(l.name),
		}
		if len(dirs) > 1 {
			o.Nodes, o.NodeRank = len(dirs), k
			o.Logger = o.Logger.Named(fmt.Sprintf("node%d", k))
		}
		if n.a, err = New(o); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		go func() { n.done <- n.a.Run(ctx) }()
		<-n.a.watching
		nodes[k] = n
	}
	play()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			n.left, n.err = n.a.Flush(fctx)
			fcancel()
		})
	}
	wg.Wait()
	var st control.Status
	var left []int64
	var ferr error
	lost := 0
	for k, n := range nodes {
		s := n.a.Status()
		st.Steps = append(st.Steps, s.Steps...)
		left = append(left, n.left...)
		if n.err != nil && ferr == nil {
			ferr = n.err
			if len(nodes) > 1 {
				ferr = fmt.Errorf("node %d: %w", k, n.err)
			}
		}
		n.cancel()
		if err := <-n.done; err != nil {
			t.Errorf("agent: %v", err)
		}
		lost = max(lost, lostCount(t, n.reg))
	}
	return f.check(l, rec, st, lost, left, ferr)
}
