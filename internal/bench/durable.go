package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/manifest"
)

// durableCase is one time-to-durable measurement: ferry-trainsim writes
// one step of Ranks files of Size at RateMiBps per file while the agent
// watches; the clock runs from the trainer's last write to the manifest on
// the server.
type durableCase struct {
	Name       string    `json:"name"`
	Ranks      int       `json:"ranks"`
	Size       int64     `json:"size"`
	RateMiBps  float64   `json:"rate_mib_s_per_file"`
	CloseWrite bool      `json:"close_write"`
	Pipeline   bool      `json:"pipeline"`
	Runs       []float64 `json:"time_to_durable_s"`
	MedianS    float64   `json:"median_s"`
	// EarlyMiB is what the agent sent while the step was written, and
	// PartsResent the parts it sent again after the step was complete
	// because their bytes had changed (ferry status), per run.
	EarlyMiB    []float64 `json:"sent_early_mib"`
	PartsResent []int64   `json:"parts_resent"`
}

// lagResult is the newest-step lag under a cadence faster than the link.
type lagResult struct {
	Policy    string  `json:"when_behind"`
	Steps     int     `json:"steps"`
	MaxLagS   float64 `json:"max_lag_s"`   // worst wait, over the steps, for a step at least as new to be durable
	LastStepS float64 `json:"last_step_s"` // from the last step's write to its commit
	Committed int     `json:"committed"`   // steps committed by the end
}

type durableResult struct {
	Cases []durableCase `json:"cases"`
	Lag   []lagResult   `json:"lag"`
}

const (
	durableRounds = 2
	lagSteps      = 8
	lagSize       = 128 << 20
	lagInterval   = time.Second
	lagBandwidth  = "100MiB/s" // a step of 2 x 128 MiB takes 2.6 s: the link falls behind a 1 s cadence
)

// durablePhase measures time-to-durable at the defaults (close-write
// detection and parts sent while the trainer writes), with close-write
// alone and with both off, alternated, and the newest-step lag of the when-behind policies.
func (b *bench) durablePhase(ctx context.Context) error {
	cases := []durableCase{
		{Name: "2 x 256 MiB at 64 MiB/s per file", Ranks: 2, Size: 256 << 20, RateMiBps: 64},
		{Name: "4 x 1 GiB at 200 MiB/s per file", Ranks: 4, Size: 1 << 30, RateMiBps: 200},
	}
	res := &durableResult{}
	for _, c := range cases {
		// The defaults, close-write alone, and both off: rounds rotate
		// which goes first.
		variants := []durableCase{c, c, c}
		variants[0].CloseWrite, variants[0].Pipeline = true, true
		variants[1].CloseWrite = true
		for round := range durableRounds {
			for i := range variants {
				dc := &variants[(i+round)%len(variants)]
				s, err := b.timeToDurable(ctx, dc)
				if err != nil {
					return fmt.Errorf("%s (close-write %v, pipeline %v): %w", dc.Name, dc.CloseWrite, dc.Pipeline, err)
				}
				dc.Runs = append(dc.Runs, s)
				log.Printf("durable: %s, close-write %v, pipeline %v: %.2f s", dc.Name, dc.CloseWrite, dc.Pipeline, s)
			}
		}
		for i := range variants {
			variants[i].MedianS = median(variants[i].Runs)
		}
		res.Cases = append(res.Cases, variants...)
	}
	for _, policy := range []string{"newest", "oldest"} {
		l, err := b.newestLag(ctx, policy)
		if err != nil {
			return fmt.Errorf("lag with --when-behind %s: %w", policy, err)
		}
		log.Printf("durable: --when-behind %s: max lag %.1f s, last step %.1f s", policy, l.MaxLagS, l.LastStepS)
		res.Lag = append(res.Lag, l)
	}
	b.rep.Durable = res
	return nil
}

// trainArgs are ferry-trainsim's flags for files written at rate MiB/s.
func trainArgs(dir string, ranks int, size int64, rate float64, steps string) []string {
	const chunk = 4 << 20
	pause := time.Duration(float64(chunk) / (rate * (1 << 20)) * float64(time.Second))
	return []string{"--dir", dir, "--ranks", fmt.Sprint(ranks), "--steps", steps, "--size", fmtSize(size),
		"--chunk", fmtSize(chunk), "--pause", pause.String()}
}

func (b *bench) timeToDurable(ctx context.Context, c *durableCase) (float64, error) {
	root := filepath.Join(b.work, "durable")
	defer os.RemoveAll(root)
	prefix := "durable"
	extra := []string{"--settle", agentSettle.String(), fmt.Sprintf("--close-write=%v", c.CloseWrite), fmt.Sprintf("--pipeline=%v", c.Pipeline)}
	ag, err := b.startAgentWith(ctx, root, prefix, c.Ranks, "", extra...)
	if err != nil {
		return 0, err
	}
	defer stopAgent(ag)
	defer func() { _ = b.srv.removePrefix(prefix) }()
	time.Sleep(time.Second)
	train := exec.CommandContext(ctx, b.cfg.trainsim, trainArgs(filepath.Join(root, "ckpt"), c.Ranks, c.Size, c.RateMiBps, fmt.Sprint(agentStep))...)
	if out, err := train.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ferry-trainsim: %v: %s", err, out)
	}
	written := lastWrite(filepath.Join(root, "ckpt"), agentStep, c.Ranks)
	ttd, err := b.waitManifest(ctx, prefix, agentStep, written)
	if err != nil {
		return 0, err
	}
	st, err := b.agentStatus(ctx, root)
	if err != nil {
		return 0, err
	}
	var resent int64
	for _, s := range st.Steps {
		resent += s.PartsResent
	}
	c.EarlyMiB = append(c.EarlyMiB, float64(st.BytesSentEarly)/(1<<20))
	c.PartsResent = append(c.PartsResent, resent)
	return ttd.Seconds(), nil
}

// agentStatus asks the agent running over root for its status.
func (b *bench) agentStatus(ctx context.Context, root string) (control.Status, error) {
	out, err := exec.CommandContext(ctx, b.cfg.ferry, "status", "--json", "--state-dir", filepath.Join(root, "state"),
		"--watch", filepath.Join(root, "ckpt")).Output()
	if err != nil {
		return control.Status{}, fmt.Errorf("ferry status: %w", err)
	}
	var st control.Status
	if err := json.Unmarshal(out, &st); err != nil {
		return control.Status{}, fmt.Errorf("ferry status: %w", err)
	}
	return st, nil
}

// lastWrite is the newest modification time of a step's rank files.
func lastWrite(dir string, step int64, ranks int) time.Time {
	var last time.Time
	for r := range ranks {
		if fi, err := os.Stat(filepath.Join(dir, trainsim.FileName(0, step, r))); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return last
}

// newestLag runs the trainer at a cadence faster than a capped link and
// records when each step is written and committed.
func (b *bench) newestLag(ctx context.Context, policy string) (lagResult, error) {
	res := lagResult{Policy: policy, Steps: lagSteps}
	root := filepath.Join(b.work, "lag")
	defer os.RemoveAll(root)
	prefix := "lag-" + policy
	ag, err := b.startAgentWith(ctx, root, prefix, 2, "", "--bandwidth", lagBandwidth, "--when-behind", policy)
	if err != nil {
		return res, err
	}
	defer stopAgent(ag)
	defer func() { _ = b.srv.removePrefix(prefix) }()
	time.Sleep(time.Second)
	steps := make([]int64, lagSteps)
	names := make([]string, lagSteps)
	for i := range steps {
		steps[i] = int64(100 * (i + 1))
		names[i] = fmt.Sprint(steps[i])
	}
	args := append(trainArgs(filepath.Join(root, "ckpt"), 2, lagSize, 1000, strings.Join(names, ",")), "--interval", lagInterval.String())
	train := exec.CommandContext(ctx, b.cfg.trainsim, args...)
	if err := train.Start(); err != nil {
		return res, err
	}
	committed := map[int64]time.Time{}
	trainDone := make(chan error, 1)
	go func() { trainDone <- train.Wait() }()
	trainerRunning := true
	deadline := time.Now().Add(5 * time.Minute)
	for len(committed) < lagSteps && time.Now().Before(deadline) {
		for _, s := range steps {
			if _, ok := committed[s]; !ok {
				p := filepath.Join(b.srv.dir, bucket, filepath.FromSlash(manifest.ManifestKey(prefix, s)))
				if _, err := os.Stat(p); err == nil {
					committed[s] = time.Now()
				}
			}
		}
		select {
		case err := <-trainDone:
			trainerRunning = false
			if err != nil {
				return res, fmt.Errorf("ferry-trainsim: %w", err)
			}
		default:
		}
		if !trainerRunning && policy == "newest" && committed[steps[lagSteps-1]] != (time.Time{}) {
			// The newest step is durable; older ones follow, which the lag
			// does not depend on.
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Committed = len(committed)
	for i, s := range steps {
		w := lastWrite(filepath.Join(root, "ckpt"), s, 2)
		// The first commit of this step or a newer one ends the wait.
		var first time.Time
		for _, n := range steps[i:] {
			if t, ok := committed[n]; ok && (first.IsZero() || t.Before(first)) {
				first = t
			}
		}
		if first.IsZero() || w.IsZero() {
			return res, fmt.Errorf("step %d: never durable (nor a newer one) within the limit", s)
		}
		res.MaxLagS = max(res.MaxLagS, first.Sub(w).Seconds())
		if i == lagSteps-1 {
			res.LastStepS = first.Sub(w).Seconds()
		}
	}
	return res, nil
}
