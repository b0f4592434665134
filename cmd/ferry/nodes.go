package main

import (
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/manifest"
)

// nodeFlags are --nodes and --node-rank of push and the agent.
func nodeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "nodes", EnvVars: []string{"FERRY_NODES"}, Usage: "nodes of the job; a step commits once every node pushed its files (default: SLURM_JOB_NUM_NODES, SLURM_NNODES, torchrun's WORLD_SIZE/LOCAL_WORLD_SIZE, else 1)"},
		&cli.IntFlag{Name: "node-rank", EnvVars: []string{"FERRY_NODE_RANK"}, Usage: "this node's rank, 0..nodes-1 (default: SLURM_NODEID, torchrun's GROUP_RANK, else 0)"},
		&cli.StringFlag{Name: "run-id", EnvVars: []string{"FERRY_RUN_ID"}, Usage: "identity of this incarnation of the job, the same on every node and new at every restart, so that a restarted job never completes a step with parts of the run before (default: SLURM_JOB_ID.SLURM_RESTART_COUNT, else none)"},
	}
}

// nodeInfo is which node of how many this process is, and where that came
// from (for the log: a launcher's variables are easy to inherit by mistake).
type nodeInfo struct {
	nodes, rank int
	run         string
	source      string
}

// readNodes resolves --nodes, --node-rank and --run-id. Each of the first
// two comes from, in order: the
// flag (or FERRY_NODES / FERRY_NODE_RANK, or the --config file); SLURM
// (SLURM_JOB_NUM_NODES, else SLURM_NNODES, with SLURM_NODEID); torchrun
// (WORLD_SIZE / LOCAL_WORLD_SIZE nodes, GROUP_RANK); else 1 node, rank 0.
// A launcher is used only when it gives both values.
func readNodes(c *cli.Context, getenv func(string) string) (nodeInfo, error) {
	n := nodeInfo{nodes: 1, rank: 0, source: "default"}
	if ln, lr, src, ok := launcherNodes(getenv); ok {
		n = nodeInfo{nodes: ln, rank: lr, source: src}
	}
	explicit := ""
	if c.IsSet("nodes") {
		n.nodes, explicit = c.Int("nodes"), "--nodes"
	}
	if c.IsSet("node-rank") {
		n.rank = c.Int("node-rank")
		explicit += " --node-rank"
	}
	if explicit != "" {
		if n.source != "default" && (!c.IsSet("nodes") || !c.IsSet("node-rank")) {
			n.source = explicit + " and " + n.source
		} else {
			n.source = explicit
		}
	}
	if n.nodes < 1 || n.nodes > manifest.MaxNodes {
		return nodeInfo{}, usagef("nodes %d (from %s): must be between 1 and %d", n.nodes, n.source, manifest.MaxNodes)
	}
	if n.rank < 0 || n.rank >= n.nodes {
		return nodeInfo{}, usagef("node rank %d of %d nodes (from %s): must be between 0 and %d", n.rank, n.nodes, n.source, n.nodes-1)
	}
	n.run = c.String("run-id")
	if !c.IsSet("run-id") {
		n.run = launcherRun(getenv)
	}
	if err := manifest.CheckRun(n.run); err != nil {
		return nodeInfo{}, usagef("--run-id: %v", err)
	}
	return n, nil
}

// launcherRun is the run identity SLURM gives: the job ID and how many
// times the job was requeued, so a requeued job is a new run.
func launcherRun(getenv func(string) string) string {
	id := getenv("SLURM_JOB_ID")
	if id == "" || manifest.CheckRun(id) != nil {
		return ""
	}
	restarts := getenv("SLURM_RESTART_COUNT")
	if _, err := strconv.Atoi(restarts); err != nil {
		restarts = "0"
	}
	return id + "." + restarts
}

// launcherNodes reads the node count and rank a job launcher exported:
// SLURM's job (the agent runs on every node of it), else torchrun's.
func launcherNodes(getenv func(string) string) (nodes, rank int, source string, ok bool) {
	if nodes, rank, source, ok = slurmNodes(getenv, "SLURM_JOB_NUM_NODES", "SLURM_NNODES"); ok {
		return nodes, rank, source, true
	}
	return torchrunNodes(getenv)
}

// envInt reads an integer variable.
func envInt(getenv func(string) string, name string) (int, bool) {
	v, err := strconv.Atoi(getenv(name))
	return v, err == nil
}

// slurmNodes reads SLURM_NODEID and the first of counts that is set.
func slurmNodes(getenv func(string) string, counts ...string) (nodes, rank int, source string, ok bool) {
	id, ok := envInt(getenv, "SLURM_NODEID")
	if !ok {
		return 0, 0, "", false
	}
	for _, name := range counts {
		if nn, ok := envInt(getenv, name); ok {
			return nn, id, fmt.Sprintf("%s=%d and SLURM_NODEID=%d", name, nn, id), true
		}
	}
	return 0, 0, "", false
}

// torchrunNodes reads the node count and rank torchrun gives its workers.
func torchrunNodes(getenv func(string) string) (nodes, rank int, source string, ok bool) {
	world, ok1 := envInt(getenv, "WORLD_SIZE")
	local, ok2 := envInt(getenv, "LOCAL_WORLD_SIZE")
	group, ok3 := envInt(getenv, "GROUP_RANK")
	if ok1 && ok2 && ok3 && local > 0 && world%local == 0 {
		return world / local, group, fmt.Sprintf("torchrun's WORLD_SIZE=%d / LOCAL_WORLD_SIZE=%d and GROUP_RANK=%d", world, local, group), true
	}
	return 0, 0, "", false
}
