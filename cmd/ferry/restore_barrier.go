package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// The restore barrier (restore/barrier.go): with the job's node count, this
// node's rank and a run identity, a restore of the latest step places it
// only once every node has verified its own files of it, so that the
// nodes of a job start from the same step even when only one of them can
// see a flipped byte. The node count and rank come from --nodes and
// --node-rank, else FERRY_NODES and FERRY_NODE_RANK, else a SLURM job
// step's (srun: SLURM_STEP_NUM_NODES, SLURM_NODEID), else torchrun's
// (WORLD_SIZE / LOCAL_WORLD_SIZE, GROUP_RANK). Unlike the agent, restore
// does not take SLURM_JOB_NUM_NODES: a batch script runs on the job's
// first node only, and a restore it runs there before srun would wait for
// nodes that never restore. The run comes from --run-id (FERRY_RUN_ID),
// else SLURM_JOB_ID.SLURM_RESTART_COUNT (launcherRun). torchrun gives no
// run identity: TORCHELASTIC_RUN_ID is the same at every restart of the
// workers, and TORCHELASTIC_RESTART_COUNT is counted by each node's agent
// on its own (torch/distributed/elastic/agent/server/local_elastic_agent.py,
// _start_workers: max_restarts - _remaining_restarts, which a node whose
// workers did not fail does not decrement), so nodes could wait at
// different barriers.

// barrierSummary is what restore --json says of the barrier: present when
// the restore knows it is one node of several.
type barrierSummary struct {
	Run   string `json:"run,omitempty"`
	Nodes int    `json:"nodes"`
	Node  int    `json:"node"`
	// From says where the node count and rank came from.
	From string `json:"from"`
	// Off, when set, says why this restore did not wait for the other
	// nodes.
	Off string `json:"off,omitempty"`
	// Steps is what the barrier did at each step it waited at; the last
	// is the step placed (or the one that failed the restore).
	Steps []restore.BarrierStep `json:"steps,omitempty"`
}

// restoreIdentity resolves which node of how many this restore is; ok is
// false when nothing says.
func (o *restoreOptions) restoreIdentity(getenv func(string) string) (nodes, rank int, from string, ok bool, err error) {
	switch {
	case o.nodes > 0:
		return o.nodes, o.nodeRank, "--nodes and --node-rank", true, nil
	case getenv("FERRY_NODES") != "" || getenv("FERRY_NODE_RANK") != "":
		n, ok1 := envInt(getenv, "FERRY_NODES")
		k, ok2 := envInt(getenv, "FERRY_NODE_RANK")
		if !ok1 || !ok2 || n < 1 || n > manifest.MaxNodes || k < 0 || k >= n {
			return 0, 0, "", false, usagef("FERRY_NODES=%q FERRY_NODE_RANK=%q: give both, with 0 <= node rank < nodes <= %d", getenv("FERRY_NODES"), getenv("FERRY_NODE_RANK"), manifest.MaxNodes)
		}
		return n, k, "FERRY_NODES and FERRY_NODE_RANK", true, nil
	}
	if n, k, src, ok := slurmNodes(getenv, "SLURM_STEP_NUM_NODES"); ok && n >= 1 && k >= 0 && k < n {
		return n, k, src, true, nil
	}
	if n, k, src, ok := torchrunNodes(getenv); ok && n >= 1 && k >= 0 && k < n {
		return n, k, src, true, nil
	}
	return 0, 0, "", false, nil
}

// barrier decides whether this restore waits at the barrier: the
// library's Barrier (nil: it does not) and what --json says of it (nil:
// the restore does not know it is one node of several).
func (o *restoreOptions) barrier(getenv func(string) string) (*restore.Barrier, *barrierSummary, error) {
	nodes, rank, from, ok, err := o.restoreIdentity(getenv)
	if err != nil || !ok || nodes == 1 {
		return nil, nil, err
	}
	run := o.runID
	if !o.runIDSet {
		run = launcherRun(getenv)
	}
	if err := manifest.CheckRun(run); err != nil {
		return nil, nil, usagef("--run-id: %v", err)
	}
	sum := &barrierSummary{Run: run, Nodes: nodes, Node: rank, From: from}
	switch {
	case o.barrierTimeout == 0:
		sum.Off = "--barrier-timeout 0"
	case run == "":
		sum.Off = "no run identity (--run-id, FERRY_RUN_ID or SLURM_JOB_ID)"
	case o.step >= 0:
		sum.Off = "--step: the barrier is for the latest step"
	case o.dryRun:
		sum.Off = "--dry-run"
	}
	if sum.Off != "" {
		return nil, sum, nil
	}
	return &restore.Barrier{Run: run, Nodes: nodes, Node: rank, Timeout: o.barrierTimeout}, sum, nil
}

// warnNoBarrier says when a restore of some ranks of the latest step
// cannot wait for the other nodes: a flipped byte in a file only another
// node reads would let this node place a step that node skips. A warning
// when the restore knows it is one node of several; --ranks alone may be
// a person looking at one rank, so that is only said.
func (o *restoreOptions) warnNoBarrier(sum *barrierSummary, log *zap.Logger) {
	if o.step >= 0 || o.dryRun || (o.ranks == "" && o.nodes == 0) {
		return
	}
	switch {
	case sum == nil:
		log.Info("restoring some ranks without the restore barrier: on a job of several nodes, if another node finds a flipped byte in a file only it reads, this node may place the step that node skips; give --nodes, --node-rank and --run-id (or run under srun, or set FERRY_NODES, FERRY_NODE_RANK and FERRY_RUN_ID) so that every node places the same step")
	case sum.Off != "" && sum.Off != "--barrier-timeout 0":
		log.Warn("restoring some ranks without the restore barrier: if another node finds a flipped byte in a file only it reads, this node may place the step that node skips; give --run-id (or FERRY_RUN_ID), the same on every node and new at every start of the job",
			zap.String("why", sum.Off))
	}
}

// printBarrier says what the barrier did at the step placed.
func printBarrier(w io.Writer, b *barrierSummary) {
	if b == nil || len(b.Steps) == 0 {
		return
	}
	last := b.Steps[len(b.Steps)-1]
	waited := "every node had already checked in"
	if len(last.WaitedFor) > 0 {
		waited = fmt.Sprintf("waited %s for %s", time.Duration(last.Seconds*float64(time.Second)).Round(time.Millisecond), nodeNames(last.WaitedFor))
	}
	fmt.Fprintf(w, "barrier: all %d nodes (run %s) verified their files of step %d before any placed it; %s\n", b.Nodes, b.Run, last.Step, waited)
}

// nodeNames names nodes for a line of output: the first 16 of many, and
// how many more.
func nodeNames(nodes []int) string {
	const most = 16
	var s []string
	for i, k := range nodes {
		if i == most {
			s = append(s, fmt.Sprintf("and %d more", len(nodes)-most))
			break
		}
		s = append(s, fmt.Sprint(k))
	}
	if len(nodes) == 1 {
		return "node " + s[0]
	}
	return "nodes " + strings.Join(s, ", ")
}
