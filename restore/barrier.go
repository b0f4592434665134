package restore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/manifest"
)

// The restore barrier: every node of a job places the same step. A
// restore of some ranks sees a flipped byte only in the files it reads
// (crosscheck.go checks the others' sizes, not their bytes), so without
// it a node that read no byte of a damaged shard would place the step
// while the node that read it recorded the damage and fell back. With a
// Barrier a restore of the latest step places nothing until every node
// of the run has verified its own files of the step: once its files are
// verified and the cross-check passed, a node writes its check-in
// (create-only, manifest.RestoreCheckinKey) and then looks, one LIST of
// the step's check-ins and one GET of its damage record per look, until
// every node has checked in (it places the step), or the step is
// recorded damaged (it does not, and falls back as for damage it found
// itself, to wait at the barrier of the older step), or Timeout passes
// (it fails, placing nothing: a node that died means the job cannot
// start anyway). A node that finds damage never checks in for that step,
// so no node sees every check-in of a damaged step.

// Defaults of the barrier's Barrier fields.
const (
	DefaultBarrierTimeout = 10 * time.Minute
	// The pause between two looks starts at DefaultBarrierPoll and grows
	// by half each time up to DefaultBarrierMaxPoll: nodes that finish
	// together are released within a fraction of a second, and one that
	// waits long costs a LIST and a GET every 2 s.
	DefaultBarrierPoll    = 200 * time.Millisecond
	DefaultBarrierMaxPoll = 2 * time.Second
	// barrierLogEvery is how often a node still waiting logs who it
	// waits for.
	barrierLogEvery = 30 * time.Second
)

// ErrBarrierTimeout is wrapped by the error of a restore whose barrier
// timed out: some node never checked in.
var ErrBarrierTimeout = errors.New("restore barrier timed out")

// Barrier says which node of which job this restore is, so that every node
// of the job places the same step (Options.Barrier).
type Barrier struct {
	// Run is the job's run identity: the same on every node, new at every
	// start of the job (manifest.CheckRun; not empty).
	Run string
	// Nodes is the job's node count and Node this node's rank,
	// 0..Nodes-1. With one node there is nothing to wait for.
	Nodes, Node int
	// Timeout bounds the wait at one step (default
	// DefaultBarrierTimeout).
	Timeout time.Duration
	// Poll and MaxPoll bound the pause between two looks (defaults
	// DefaultBarrierPoll and DefaultBarrierMaxPoll).
	Poll, MaxPoll time.Duration
}

// BarrierStep is what the barrier did at one step.
type BarrierStep struct {
	Step int64 `json:"step"`
	// Outcome is "all checked in" (the step was placed), "damaged" (it
	// was recorded damaged while this node waited), "timed out" or
	// "failed" (the check-in or the wait failed).
	Outcome string `json:"outcome"`
	// WaitedFor are the nodes that had not checked in when this one did;
	// Missing those still absent at the end (on a timeout, the nodes
	// that never checked in).
	WaitedFor []int `json:"waited_for,omitempty"`
	Missing   []int `json:"missing,omitempty"`
	// Seconds is the time from the check-in to the outcome, Looks the
	// LISTs of the check-ins it took.
	Seconds float64 `json:"seconds"`
	Looks   int     `json:"looks"`
}

// check validates b, and returns nil when there is nothing to wait for.
func (b *Barrier) check() (*Barrier, error) {
	switch {
	case b == nil || b.Nodes == 1:
		return nil, nil
	case b.Nodes < 1 || b.Nodes > manifest.MaxNodes || b.Node < 0 || b.Node >= b.Nodes:
		return nil, fmt.Errorf("restore barrier: node %d of %d nodes: want 0 <= node < nodes <= %d", b.Node, b.Nodes, manifest.MaxNodes)
	case b.Run == "":
		return nil, errors.New("restore barrier: no run identity")
	}
	if err := manifest.CheckRun(b.Run); err != nil {
		return nil, fmt.Errorf("restore barrier: %w", err)
	}
	c := *b
	if c.Timeout <= 0 {
		c.Timeout = DefaultBarrierTimeout
	}
	if c.Poll <= 0 {
		c.Poll = DefaultBarrierPoll
	}
	if c.MaxPoll < c.Poll {
		c.MaxPoll = max(c.Poll, DefaultBarrierMaxPoll)
	}
	return &c, nil
}

// barrier checks this node in for c's step and waits until every node of
// the run has (nil: place the step), the step is recorded damaged (a
// DamagedError, Meanwhile) or the timeout passes.
func (c *crossCheck) barrier(ctx context.Context) (err error) {
	b, log := c.opts.Barrier, c.opts.Logger
	rec := BarrierStep{Step: c.step, Outcome: "failed"}
	start := time.Now()
	defer func() {
		rec.Seconds = time.Since(start).Seconds()
		if c.opts.barrierSteps != nil {
			*c.opts.barrierSteps = append(*c.opts.barrierSteps, rec)
		}
	}()
	set := manifest.PartSet{Step: c.step, Nodes: b.Nodes, Run: b.Run}
	ci := remote.Checkin{Step: c.step, Run: b.Run, Nodes: b.Nodes, Node: b.Node, By: c.opts.RecordBy, At: start.UTC()}
	if _, err := remote.CheckIn(ctx, c.opts.Store, c.opts.Prefix, ci); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &checkinError{step: c.step, prefix: c.opts.Prefix, err: err}
	}
	deadline, pause, logged := start.Add(b.Timeout), b.Poll, start
	for {
		done, err := c.look(ctx, set, &rec)
		if done || err != nil {
			return err
		}
		now := time.Now()
		if !now.Before(deadline) {
			rec.Outcome = "timed out"
			who := nodeList(rec.Missing) + " never checked in"
			if len(rec.Missing) == 0 {
				who = "the check-ins could not be listed"
			}
			return fmt.Errorf("restore barrier of step %d (run %s, %d nodes): %s within %v, so this node placed nothing: run ferry restore on every node with the same --run-id and --nodes (the missing nodes' logs say why they stopped), or restore without the barrier (--barrier-timeout 0): %w",
				c.step, b.Run, b.Nodes, who, b.Timeout, ErrBarrierTimeout)
		}
		if now.Sub(logged) >= barrierLogEvery {
			logged = now
			log.Info("still waiting for the other nodes to verify the step", zap.Int64("step", c.step), zap.String("missing", nodeList(rec.Missing)),
				zap.Duration("waited", now.Sub(start).Round(time.Second)), zap.Duration("timeout", b.Timeout))
		}
		t := time.NewTimer(min(pause, deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(pause*3/2, b.MaxPoll)
	}
}

// look is one look at the barrier: a LIST of the check-ins and, unless
// every node is in, a GET of the step's damage record. It reports whether
// the wait is over (err nil: place the step).
func (c *crossCheck) look(ctx context.Context, set manifest.PartSet, rec *BarrierStep) (bool, error) {
	log := c.opts.Logger
	in, err := remote.CheckedIn(ctx, c.opts.Store, c.opts.Prefix, set)
	rec.Looks++
	switch {
	case err != nil && ctx.Err() != nil:
		return true, ctx.Err()
	case err != nil:
		log.Warn("could not look at the other nodes' check-ins; looking again", zap.Int64("step", c.step), zap.Error(err))
	default:
		missing := absent(in)
		if rec.Looks == 1 {
			rec.WaitedFor = missing
			if len(missing) > 0 {
				log.Info("verified this node's files of the step; waiting for every node to verify its own before placing it (restore barrier)",
					zap.Int64("step", c.step), zap.String("run", set.Run), zap.Int("node", c.opts.Barrier.Node), zap.Int("nodes", set.Nodes),
					zap.String("waiting_for", nodeList(missing)))
			}
		}
		rec.Missing = missing
		if len(missing) == 0 {
			rec.Outcome = "all checked in"
			log.Info("every node verified its files of the step: placing it", zap.Int64("step", c.step), zap.Int("nodes", set.Nodes))
			return true, nil
		}
	}
	d, ok, err := remote.DamageOf(ctx, c.opts.Store, c.opts.Prefix, c.step)
	switch {
	case err != nil && ctx.Err() != nil:
		return true, ctx.Err()
	case err != nil:
		log.Warn("could not read the step's damage record at the restore barrier; looking again", zap.Int64("step", c.step), zap.Error(err))
	case ok:
		rec.Outcome = "damaged"
		return true, &DamagedError{Step: c.step, Path: d.Path, Key: d.Key, Recorded: true, Meanwhile: true,
			Err: fmt.Errorf("step %d was recorded damaged in the bucket (%s) while this restore waited for the other nodes to verify it, by %s: %s",
				c.step, manifest.DamagedKey(c.opts.Prefix, c.step), recorder(d), d.Reason)}
	}
	return false, nil
}

// checkinError is a check-in that failed: nothing is placed, and the
// message says what the barrier needs, also where the store's error has
// a fix of its own for the user (UserReason: credentials, say).
type checkinError struct {
	step   int64
	prefix string
	err    error
}

func (e *checkinError) Error() string { return e.say(e.err.Error()) }
func (e *checkinError) Unwrap() error { return e.err }

// UserReason is the store's fix, when it has one, with the barrier's.
func (e *checkinError) UserReason() string {
	var ur interface{ UserReason() string }
	if !errors.As(e.err, &ur) || ur.UserReason() == "" {
		return ""
	}
	return e.say("cannot check in: " + ur.UserReason())
}

func (e *checkinError) say(why string) string {
	return fmt.Sprintf("restore barrier of step %d: %s; nothing placed: the barrier needs credentials that can write under %s (or restore without it: --barrier-timeout 0)",
		e.step, why, manifest.CheckinsPrefix(e.prefix))
}

// absent returns the nodes not checked in.
func absent(in []bool) []int {
	var out []int
	for k, ok := range in {
		if !ok {
			out = append(out, k)
		}
	}
	return out
}

// nodeList names nodes for a message: "node 2", "nodes 2, 3", the first
// 16 of many and how many more.
func nodeList(nodes []int) string {
	const most = 16
	if len(nodes) == 0 {
		return "no node"
	}
	var s []string
	for i, k := range nodes {
		if i == most {
			s = append(s, fmt.Sprintf("and %d more", len(nodes)-most))
			break
		}
		s = append(s, strconv.Itoa(k))
	}
	if len(nodes) == 1 {
		return "node " + s[0]
	}
	return "nodes " + strings.Join(s, ", ")
}
