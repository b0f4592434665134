package main

import (
	"time"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/uploader"
	"github.com/urfave/cli/v2"
)

// agentFlags are `ferry agent`'s flags, each with its FERRY_* variable.
func agentFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "config", EnvVars: []string{"FERRY_CONFIG"}, Usage: "`FILE` of FERRY_NAME=value lines, the format of a systemd EnvironmentFile (default: none)"},
		&cli.StringFlag{Name: "watch", EnvVars: []string{"FERRY_WATCH"}, Usage: "checkpoint `DIR` the trainer writes to (required; waited for if it does not exist yet)"},
		&cli.StringFlag{Name: "to", EnvVars: []string{"FERRY_TO"}, Usage: "destination `s3://bucket/prefix` or file:///folder (required)"},
		&cli.StringFlag{Name: "layout", Value: "auto", EnvVars: []string{"FERRY_LAYOUT"}, Usage: "checkpoint layout: " + joinNames(detect.LayoutNames())},
		&cli.StringFlag{Name: "state-dir", EnvVars: []string{"FERRY_STATE_DIR"}, Usage: "base of the journal, upload state and control socket, kept per watch dir and destination under agents/ (default $XDG_STATE_HOME/ferry or ~/.local/state/ferry)"},
		&cli.StringFlag{Name: "control-group", EnvVars: []string{"FERRY_CONTROL_GROUP"}, Usage: "let members of `GROUP` (a name or a number) use the control socket, for ferry commit, flush and status run by the trainer's user beside an agent that runs as another; the state dir must let them pass (mode 0711) (default: the agent's user only)"},
		&cli.IntFlag{Name: "concurrency", Value: uploader.DefaultConcurrency, EnvVars: []string{"FERRY_CONCURRENCY"}, Usage: "most upload requests in flight; within it, requests are sized by bytes (16 parts in flight), so small files get many and big parts few"},
		&cli.StringFlag{Name: "part-size", Value: "64MiB", EnvVars: []string{"FERRY_PART_SIZE"}, Usage: "multipart part size"},
		packFlag(),
		&cli.StringFlag{Name: "bandwidth", EnvVars: []string{"FERRY_BANDWIDTH"}, Usage: "cap the upload rate (and what --serve-peers sends), e.g. 800MiB/s (default: unlimited)"},
		&cli.StringFlag{Name: "serve-peers", EnvVars: []string{"FERRY_SERVE_PEERS"}, Usage: "serve the committed steps still on disk, unchanged, to nodes restoring them with --peers, on `ADDRESS` (e.g. :7077; default: off)"},
	}
	flags = append(flags, peerTokenFlags("with --serve-peers")...)
	flags = append(flags, []cli.Flag{
		&cli.BoolFlag{Name: "peer-tls", EnvVars: []string{"FERRY_PEER_TLS"}, Usage: "with --serve-peers: serve over TLS, as restore --peer-tls"},
		peerAllowFlag("with --serve-peers", "addresses and CIDRs (10.0.0.0/16, fd00::/64) of the nodes that restore from this one"),
		&cli.IntFlag{Name: "keep-local", EnvVars: []string{"FERRY_KEEP_LOCAL"}, Usage: "after a commit, delete local files of committed steps beyond the `N` newest (0: never delete)"},
		&cli.StringFlag{Name: "metrics-addr", Value: "127.0.0.1:9464", EnvVars: []string{"FERRY_METRICS_ADDR"}, Usage: "Prometheus /metrics, /healthz and /readyz `ADDR` (\"off\" disables)"},
		&cli.DurationFlag{Name: "ready-store-timeout", Value: agent.DefaultReadyStoreTimeout, EnvVars: []string{"FERRY_READY_STORE_TIMEOUT"},
			Usage: "/readyz fails (503) once the store's requests have gone unanswered for this long (an idle agent asks nothing, and stays ready)"},
		&cli.DurationFlag{Name: "expect-commit-every", Value: 2 * time.Hour, EnvVars: []string{"FERRY_EXPECT_COMMIT_EVERY"},
			Usage: "how often a commit is expected, exported as ferry_expected_commit_interval_seconds for the FerryNoRecentCommit alert (deploy/monitoring; 0: no expectation)"},
		&cli.DurationFlag{Name: "settle", Value: detect.DefaultSettle, EnvVars: []string{"FERRY_SETTLE"}, Usage: "how long a step's files must stay unchanged before upload"},
		&cli.BoolFlag{Name: "close-write", Value: true, EnvVars: []string{"FERRY_CLOSE_WRITE"},
			Usage: "a step whose writers closed its files is ready at once (Linux inotify); false: every step waits out --settle"},
		&cli.BoolFlag{Name: "pipeline", Value: true, EnvVars: []string{"FERRY_PIPELINE"},
			Usage: "send parts of files larger than --part-size while the trainer writes them, each as soon as it is written, in parts of a quarter of --part-size (at least 8 MiB; a power of two) so that little is left once the file is closed; each is committed only if the final file's bytes hash to what was sent"},
		&cli.StringFlag{Name: "when-behind", Value: agent.NewestFirst, EnvVars: []string{"FERRY_WHEN_BEHIND"},
			Usage: "which waiting step goes first when the link falls behind: newest (older ones follow), oldest (in order), skip (older waiting steps are not uploaded)"},
		&cli.DurationFlag{Name: "rescan-interval", Value: detect.DefaultRescan, EnvVars: []string{"FERRY_RESCAN_INTERVAL"}, Usage: "full rescan interval (events are the main signal)"},
		&cli.BoolFlag{Name: "poll", EnvVars: []string{"FERRY_POLL"}, Usage: "poll instead of inotify (NFS, Lustre, FUSE)"},
		&cli.DurationFlag{Name: "poll-interval", Value: detect.DefaultPollInterval, EnvVars: []string{"FERRY_POLL_INTERVAL"}, Usage: "rescan interval with --poll"},
		&cli.StringFlag{Name: "step-pattern", EnvVars: []string{"FERRY_STEP_PATTERN"}, Usage: "`REGEX` reading the step from a name (flat and dcp layouts, and the folders of Lightning's DeepSpeed strategy; default: the layout's own names)"},
		&cli.IntFlag{Name: "expected-ranks", EnvVars: []string{"FERRY_EXPECTED_RANKS"}, Usage: "ranks of this node that write files (ranks in names, else ZeRO (dp, mp) pairs or Megatron mp_rank folders); a step waits for all of them, and with them can complete when its files are closed (0: unknown, the settle window decides)"},
		&cli.BoolFlag{Name: "no-marker", EnvVars: []string{"FERRY_NO_MARKER"}, Usage: "ignore the layout's completion marker and trust --settle alone; on nodes other than 0 of a multi-node job with the dcp, deepspeed, megatron, hf or composer layout this is the default (--no-marker=false: every node sees the marker)"},
		&cli.DurationFlag{Name: "drain-timeout", Value: agent.DefaultDrainTimeout, EnvVars: []string{"FERRY_DRAIN_TIMEOUT"}, Usage: "on SIGTERM, keep uploading found steps this long"},
		allowEmptyStepFlag(),
		conditionalWritesFlag(),
		&cli.StringFlag{Name: "priority", Value: "low", EnvVars: []string{"FERRY_PRIORITY"},
			Usage: "CPU and I/O priority: low (SCHED_IDLE, or nice 19; I/O best-effort 7) yields to the trainer, normal keeps the caller's"},
		&cli.StringFlag{Name: "on-commit", EnvVars: []string{"FERRY_ON_COMMIT"}, Usage: "shell `CMD` run (sh -c) after each step is committed, with FERRY_STEP, FERRY_DESTINATION (the run's URL), FERRY_FILES, FERRY_BYTES and FERRY_REVISION set; hooks run one at a time off the upload path, a few may wait and more are dropped with a warning; a failure is logged, never fatal (default: none)"},
		&cli.DurationFlag{Name: "on-commit-timeout", Value: agent.DefaultHookTimeout, EnvVars: []string{"FERRY_ON_COMMIT_TIMEOUT"}, Usage: "kill an --on-commit hook (and its children) that runs longer than this"},
		&cli.IntFlag{Name: "keep-remote", EnvVars: []string{"FERRY_KEEP_REMOTE"}, Usage: "after each commit it writes, prune the bucket to the `N` newest steps, as ferry prune --keep-last N (0: never delete)"},
		&cli.Int64Flag{Name: "keep-remote-every", EnvVars: []string{"FERRY_KEEP_REMOTE_EVERY"}, Usage: "with --keep-remote, also keep every step divisible by `K`, as ferry prune --keep-every K (default: 0, none)"},
	}...)
	return append(flags, append(nodeFlags(), commonFlags()...)...)
}
