package scale

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/prune"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// historyResult is what reading a long history costs: requests and time of
// "latest", `ferry list` (all and --last 20) and a prune plan.
type historyResult struct {
	Steps  int         `json:"steps"`
	Phases []phaseCost `json:"phases"`
}

type phaseCost struct {
	Name     string           `json:"name"`
	Wall     time.Duration    `json:"wall_ns"`
	Requests map[string]int64 `json:"requests"`
	Note     string           `json:"note,omitempty"`
}

// filesPerStep is the files of each step of the history (8 ranks).
const filesPerStep = 8

func makeHistory(ctx context.Context, mem store.Store, steps int) error {
	hash := strings.Repeat("5f", 32)
	for s := int64(1); s <= int64(steps); s++ {
		m := &manifest.Manifest{Format: manifest.FormatVersion, Step: s, Created: time.Now().UTC().Truncate(time.Millisecond)}
		for r := range filesPerStep {
			p := fmt.Sprintf("model-rank%d.pt", r)
			key := manifest.DataKey(simPrefix, s, "a1", p)
			if _, err := mem.Put(ctx, key, bytes.NewReader([]byte("x")), 1, store.PutOptions{}); err != nil {
				return err
			}
			m.Files = append(m.Files, manifest.File{Path: p, Size: 1, BLAKE3: hash, Key: key})
		}
		if _, _, err := remote.Commit(ctx, mem, simPrefix, m); err != nil {
			return err
		}
	}
	return nil
}

func measureHistory(ctx context.Context, steps int, latency time.Duration) (historyResult, error) {
	mem := store.NewMemStore()
	if err := makeHistory(ctx, mem, steps); err != nil {
		return historyResult{}, fmt.Errorf("write a history of %d steps: %w", steps, err)
	}
	res := historyResult{Steps: steps}
	run := func(name string, fn func(store.Store) (string, error)) error {
		c := &s3store.Counters{}
		st := &simStore{inner: mem, latency: latency, counts: c}
		start := time.Now()
		note, err := fn(st)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		res.Phases = append(res.Phases, phaseCost{Name: name, Wall: time.Since(start), Requests: c.Snapshot(), Note: note})
		return nil
	}
	err := run("latest step (restore, push)", func(st store.Store) (string, error) {
		s, err := remote.LatestStep(ctx, st, simPrefix)
		return fmt.Sprintf("step %d", s), err
	})
	if err == nil {
		err = run("ferry list --last 20", func(st store.Store) (string, error) {
			rows, err := remote.Summaries(ctx, st, simPrefix, 20)
			return fmt.Sprintf("%d rows", len(rows)), err
		})
	}
	if err == nil {
		err = run("ferry list (all)", func(st store.Store) (string, error) {
			rows, err := remote.Summaries(ctx, st, simPrefix, 0)
			return fmt.Sprintf("%d rows", len(rows)), err
		})
	}
	if err == nil {
		err = run("ferry prune --keep-last 5 (plan)", func(st store.Store) (string, error) {
			p, err := prune.MakePlan(ctx, prune.Options{Store: st, Prefix: simPrefix, Policy: prune.Policy{KeepLast: 5}, Logger: zap.NewNop(),
				Now: func() time.Time { return time.Now().Add(2 * prune.DefaultMinAge) }})
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("would delete %d manifests and %d objects", len(p.Manifests), len(p.Objects)), nil
		})
	}
	return res, err
}
