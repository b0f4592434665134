package main

import (
	"testing"

	"github.com/urfave/cli/v2"
)

func nodesFrom(t *testing.T, args []string, env map[string]string) (nodeInfo, error) {
	t.Helper()
	var got nodeInfo
	var gerr error
	app := &cli.App{Flags: nodeFlags(), Action: func(c *cli.Context) error {
		got, gerr = readNodes(c, func(k string) string { return env[k] })
		return nil
	}}
	if err := app.Run(append([]string{"ferry"}, args...)); err != nil {
		t.Fatal(err)
	}
	return got, gerr
}

func TestReadNodes(t *testing.T) {
	slurm := map[string]string{"SLURM_NODEID": "2", "SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "9"}
	torch := map[string]string{"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1"}
	both := map[string]string{"SLURM_NODEID": "3", "SLURM_NNODES": "5", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1"}
	cases := []struct {
		name        string
		args        []string
		env         map[string]string
		nodes, rank int
	}{
		{"default", nil, nil, 1, 0},
		{"slurm", nil, slurm, 4, 2},
		{"torchrun", nil, torch, 2, 1},
		{"slurm before torchrun, SLURM_NNODES fallback", nil, both, 5, 3},
		{"flags win", []string{"--nodes", "3", "--node-rank", "0"}, slurm, 3, 0},
		{"flag for one, launcher for the other", []string{"--nodes", "8"}, slurm, 8, 2},
		{"torchrun without LOCAL_WORLD_SIZE is ignored", nil, map[string]string{"WORLD_SIZE": "16", "GROUP_RANK": "1"}, 1, 0},
	}
	for _, c := range cases {
		n, err := nodesFrom(t, c.args, c.env)
		if err != nil || n.nodes != c.nodes || n.rank != c.rank {
			t.Errorf("%s: %+v %v, want %d nodes rank %d", c.name, n, err, c.nodes, c.rank)
		}
	}
	t.Setenv("FERRY_NODES", "6")
	t.Setenv("FERRY_NODE_RANK", "5")
	if n, err := nodesFrom(t, nil, slurm); err != nil || n.nodes != 6 || n.rank != 5 {
		t.Errorf("FERRY_NODES/FERRY_NODE_RANK over SLURM: %+v %v", n, err)
	}
	if _, err := nodesFrom(t, []string{"--node-rank", "6"}, nil); err == nil {
		t.Error("rank 6 of 6 accepted")
	}
	if _, err := nodesFrom(t, []string{"--nodes", "0"}, nil); err == nil {
		t.Error("0 nodes accepted")
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, ""},
		{nil, map[string]string{"SLURM_JOB_ID": "4242"}, "4242.0"},
		{nil, map[string]string{"SLURM_JOB_ID": "4242", "SLURM_RESTART_COUNT": "2"}, "4242.2"},
		{[]string{"--run-id", "mine"}, map[string]string{"SLURM_JOB_ID": "4242"}, "mine"},
	} {
		n, err := nodesFrom(t, c.args, c.env)
		if err != nil || n.run != c.want {
			t.Errorf("run id from %v %v = %q, %v; want %q", c.args, c.env, n.run, err, c.want)
		}
	}
	if _, err := nodesFrom(t, []string{"--run-id", "a/b"}, nil); err == nil {
		t.Error("run id a/b accepted")
	}
}
