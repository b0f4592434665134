package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/sdnotify"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

type agentOptions struct {
	remote        remoteOptions
	watch, to     string
	layout        string
	stateDir      string
	controlGroup  string
	controlGID    int // controlGroup's number, -1 without it
	concurrency   int
	partSize      int64
	noPack        bool
	bandwidth     int64
	keepLocal     int
	metricsAddr   string
	metricsChosen bool // --metrics-addr or FERRY_METRICS_ADDR given
	readyTimeout  time.Duration
	expectCommit  time.Duration
	settle        time.Duration
	rescan        time.Duration
	poll          bool
	pollInterval  time.Duration
	stepPattern   string
	expectedRanks int
	noMarker      bool
	// markerNote says what nodeMarker decided, for the start log.
	markerNote   string
	drainTimeout time.Duration
	node         nodeInfo
	keepRemote   int
	// keepRemoteEvery is --keep-remote-every (agent_retention.go).
	keepRemoteEvery int64
	allowEmpty      bool
	unsafeCond      bool
	priority        string
	closeWrite      bool
	pipeline        bool
	whenBehind      string
	// onCommit is the hook run after each commit, for onCommitTimeout.
	onCommit        string
	onCommitTimeout time.Duration
	// servePeers, token and peerTLS: serve committed steps to restoring
	// nodes (--serve-peers).
	servePeers, peerToken string
	peerTLS               bool
	peerAllow             string // --peer-allow ("": any address)
}

func newAgentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "watch a checkpoint directory and upload every completed step in the background",
		Description: commandDoc{
			about: "Watches the checkpoint directory --watch and uploads each step once the trainer has finished writing " +
				"it (the layout's completion marker is there, no temporary file is left, and its files are closed by their " +
				"writers or unchanged for --settle), then commits its manifest at --to. Run one per node and checkpoint " +
				"directory, beside the trainer; a --watch that does not exist yet is waited for (logged once). After a crash " +
				"it resumes where it stopped; on SIGTERM it drains for --drain-timeout. `ferry status` and `ferry flush` talk " +
				"to it over its control socket.",
			env: "Options also come from the environment (each flag's variable is listed with it) and from --config FILE, " +
				"a file of FERRY_NAME=value lines (a systemd EnvironmentFile); flags win over the environment, which wins over " +
				"the file. FERRY_CONCURRENCY and FERRY_BANDWIDTH are push's too (requests in flight, and the cap on what this " +
				"node sends); verify and copy have their own.",
			examples: []string{"ferry agent --watch /nvme/ckpt --to s3://my-bucket/run &"},
			exits: []string{"0 stopped by SIGTERM or SIGINT after its drain (steps not committed by then resume at the next start)",
				"1 failure: the bucket or the state dir cannot be used, or another agent runs for the same --watch and --to", exit2},
		}.String(),
		Flags:  agentFlags(),
		Before: func(c *cli.Context) error { return applyConfigFile(c, c.String("config")) },
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("agent takes no arguments (got %q); use --watch DIR", c.Args().First())
			}
			o, err := readAgentOptions(c)
			if err != nil {
				return err
			}
			return runAgent(c.Context, o, c.App.ErrWriter)
		},
	}
}

// readAgentOptions converts the agent's flags (also ferry doctor's) once.
func readAgentOptions(c *cli.Context) (agentOptions, error) {
	o := agentOptions{
		remote:          readRemoteOptions(c),
		watch:           c.String("watch"),
		to:              c.String("to"),
		layout:          c.String("layout"),
		stateDir:        c.String("state-dir"),
		controlGroup:    c.String("control-group"),
		controlGID:      -1,
		concurrency:     c.Int("concurrency"),
		keepLocal:       c.Int("keep-local"),
		metricsAddr:     c.String("metrics-addr"),
		metricsChosen:   c.IsSet("metrics-addr"),
		readyTimeout:    c.Duration("ready-store-timeout"),
		expectCommit:    c.Duration("expect-commit-every"),
		settle:          c.Duration("settle"),
		rescan:          c.Duration("rescan-interval"),
		poll:            c.Bool("poll"),
		pollInterval:    c.Duration("poll-interval"),
		stepPattern:     c.String("step-pattern"),
		expectedRanks:   c.Int("expected-ranks"),
		noMarker:        c.Bool("no-marker"),
		drainTimeout:    c.Duration("drain-timeout"),
		keepRemote:      c.Int("keep-remote"),
		keepRemoteEvery: c.Int64("keep-remote-every"),
		allowEmpty:      c.Bool("allow-empty"),
		unsafeCond:      c.Bool(unsafeConditionalFlag),
		priority:        c.String("priority"),
		closeWrite:      c.Bool("close-write"),
		pipeline:        c.Bool("pipeline"),
		whenBehind:      c.String("when-behind"),
		onCommit:        c.String("on-commit"),
		onCommitTimeout: c.Duration("on-commit-timeout"),
		servePeers:      c.String("serve-peers"),
		peerTLS:         c.Bool("peer-tls"),
		noPack:          !c.Bool("pack"),
	}
	var err error
	if o.servePeers != "" {
		if o.peerToken, err = readPeerToken(c); err != nil {
			return o, err
		}
		if o.peerAllow, err = readPeerAllow(c, false); err != nil {
			return o, err
		}
	}
	if o.node, err = readNodes(c, os.Getenv); err != nil {
		return o, err
	}
	o.markerNote = o.nodeMarker(c.IsSet("no-marker"))
	if o.controlGroup != "" {
		if o.controlGID, err = lookupGroup(o.controlGroup); err != nil {
			return o, err
		}
	}
	if o.partSize, err = sizeFlag(c, "part-size"); err != nil {
		return o, err
	}
	o.bandwidth, err = rateFlag(c, "bandwidth")
	return o, err
}

// detectOptions are the agent's detection settings (also ferry doctor's).
func (o agentOptions) detectOptions() detect.Options {
	return detect.Options{
		Dir: o.watch, Layout: o.layout, Settle: o.settle, Rescan: o.rescan,
		Poll: o.poll, PollInterval: o.pollInterval, StepPattern: o.stepPattern,
		ExpectedRanks: o.expectedRanks, NoMarker: o.noMarker, CloseWrite: o.closeWrite,
	}
}

func (o agentOptions) validate() error {
	switch {
	case o.watch == "":
		return usagef("--watch is required (the checkpoint directory)")
	case o.partSize < store.MinPartSize || o.partSize > store.MaxPartSize:
		return usagef("--part-size: must be between 5 MiB and 5 GiB")
	case o.concurrency < 1 || o.concurrency > 1024:
		return usagef("--concurrency %d: must be between 1 and 1024", o.concurrency)
	case o.keepLocal < 0:
		return usagef("--keep-local %d: must be 0 (keep everything) or more", o.keepLocal)
	case checkKeepRemote(o.keepRemote, o.keepRemoteEvery) != nil:
		return checkKeepRemote(o.keepRemote, o.keepRemoteEvery)
	case o.onCommitTimeout <= 0:
		return usagef("--on-commit-timeout %v: must be positive", o.onCommitTimeout)
	case o.expectedRanks < 0:
		return usagef("--expected-ranks %d: must be 0 or more", o.expectedRanks)
	case o.settle <= 0 || o.drainTimeout <= 0 || o.readyTimeout <= 0:
		return usagef("--settle, --drain-timeout and --ready-store-timeout must be positive")
	case o.expectCommit < 0:
		return usagef("--expect-commit-every %s: must be 0 (no expectation) or more", o.expectCommit)
	case o.priority != "low" && o.priority != "normal":
		return usagef("--priority %q: use low or normal", o.priority)
	}
	if !isKnownLayout(o.layout) {
		return usagef("--layout %q: use one of %s", o.layout, joinNames(detect.LayoutNames()))
	}
	// A --watch that does not exist yet is waited for (waitForWatchDir).
	if fi, err := os.Stat(o.watch); err == nil && !fi.IsDir() {
		return usagef("--watch %s: not a directory", o.watch)
	}
	return nil
}

func runAgent(ctx context.Context, o agentOptions, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	loc, err := parseLocation("to", o.to)
	if err != nil {
		return err
	}
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do if stderr is gone
	if o.priority == "low" {
		// First of all that the agent starts: this may re-execute it.
		lowerPriority(ctx, log)
	}
	if ok, err := waitForWatchDir(ctx, o.watch, watchDirPoll, log); !ok {
		return err
	}
	return runAgentService(ctx, o, loc, log)
}

// runAgentService opens the destination, binds the control socket and the
// metrics endpoint, and runs the agent with them until ctx ends and its
// drain is over. Each listener is closed by its defer, on every path:
// agent.Service serves them while it runs, and stops serving at its end.
func runAgentService(ctx context.Context, o agentOptions, loc manifest.Location, log *zap.Logger) error {
	base, stateDir := agentStateDir(o, loc, log)
	reg, metrics := agentMetrics()
	metrics.SetInfo(control.Info{Version: version, Destination: loc.String(), Run: o.node.run})
	metrics.SetExpectedCommitInterval(o.expectCommit)
	var counters s3store.Counters
	st, err := openLocation(ctx, o.remote, loc, log, o.concurrency,
		func(op string) { counters.Count(op); metrics.Request(op) })
	if err != nil {
		return err
	}
	// Trust the state dir (StrictModes) before anything is created or
	// chmodded in it; then bind the control socket: a second agent for
	// the same watch dir and destination must fail there, before it
	// touches the journal or the upload state.
	if err := agent.PrepareStateDir(stateDir); err != nil {
		return err
	}
	ctl, err := control.Listen(control.SocketPath(stateDir), log)
	if err != nil {
		return err
	}
	defer ctl.Close()
	// The socket may be open to a group (--control-group); of its
	// members, only those who may read the watch dir are answered.
	ctl.SetAuthorizer(control.WatchReaders(o.watch))
	if err := proveConditionalWrites(ctx, st, o.remote, loc, base, o.unsafeCond, o.node.nodes, log); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing to drain
		}
		return fmt.Errorf("agent for %s: %w", loc, err)
	}
	var ready readiness
	ms, err := listenMetrics(o.metricsAddr, o.metricsChosen, reg, ready.probes(), log)
	if err != nil {
		return err
	}
	defer ms.close()
	// One cap for everything the agent sends: uploads (the store paces
	// the bodies it sends) and peers served.
	limiter := ratelimit.New(o.bandwidth)
	a, err := agent.New(o.agentConfig(ratelimit.Uploads(st, limiter), loc, stateDir, ms.addr(), counters.Snapshot, metrics, log))
	if err != nil {
		return err
	}
	ready.agent.Store(a)
	if o.controlGID >= 0 {
		if err := agent.ShareControl(base, stateDir, o.controlGID); err != nil {
			return fmt.Errorf("--control-group %s: %w", o.controlGroup, err)
		}
		log.Info("control socket open to a group", zap.String("group", o.controlGroup), zap.String("socket", control.SocketPath(stateDir)))
	}
	if o.servePeers != "" {
		// The bucket's own store: the peers' key is derived from its
		// credentials, and serving reads, which the cap leaves alone.
		seed, err := startSeed(ctx, o, st, loc, a, limiter, log)
		if err != nil {
			return err
		}
		defer seed.Close()
	}
	svc := &agent.Service{Agent: a, Control: ctl, Metrics: ms.MetricsServer, Abort: abortOf(ctx), Logger: log,
		Ready: func() { _ = sdnotify.Ready() }, Stopping: func() { _ = sdnotify.Stopping() }, Background: watchdog(a)}
	return svc.Run(ctx)
}

// agentStateDir returns the shared base state dir and this agent's own
// folder in it (one per watch dir and destination), warning about a
// journal an older ferry left in the base.
func agentStateDir(o agentOptions, loc manifest.Location, log *zap.Logger) (base, stateDir string) {
	base = stateBase(o.stateDir)
	stateDir = agent.AgentStateDir(base, agentIdentity(o.watch, loc))
	if old := legacyJournal(base); old != "" {
		log.Warn("ignoring a journal from an older ferry that does not say which destination it is for; committed steps are found in the bucket",
			zap.String("journal", old))
	}
	if o.node.nodes > 1 {
		log.Info("multi-node agent", zap.Int("node_rank", o.node.rank), zap.Int("nodes", o.node.nodes), zap.String("run", o.node.run), zap.String("from", o.node.source))
	}
	o.logNodeMarker(log)
	return base, stateDir
}

// agentConfig converts the flags into the agent's options, with the store
// it writes through (bandwidth-capped) and what runAgentService set up.
func (o agentOptions) agentConfig(st store.Store, loc manifest.Location, stateDir, metricsAddr string,
	requests func() map[string]int64, metrics *control.Metrics, log *zap.Logger) agent.Options {
	return agent.Options{
		Store: st, Prefix: loc.Prefix, URL: loc.String(),
		Detect:            o.detectOptions(),
		WhenBehind:        o.whenBehind,
		Pipeline:          o.pipeline,
		Upload:            uploader.Options{PartSize: o.partSize, Concurrency: o.concurrency, DropCache: true, NoPack: o.noPack},
		StateDir:          stateDir,
		AllowEmpty:        o.allowEmpty,
		MetricsAddr:       metricsAddr,
		KeepLocal:         o.keepLocal,
		KeepRemote:        o.keepRemote,
		KeepRemoteEvery:   o.keepRemoteEvery,
		OnCommit:          agent.HookOptions{Cmd: o.onCommit, Timeout: o.onCommitTimeout},
		Nodes:             o.node.nodes,
		NodeRank:          o.node.rank,
		Run:               o.node.run,
		DrainTimeout:      o.drainTimeout,
		ReadyStoreTimeout: o.readyTimeout,
		Requests:          requests,
		Metrics:           metrics,
		Logger:            log,
	}
}

// watchdog pings systemd's watchdog (WatchdogSec) while the agent's loops
// are alive (agent.FeedWatchdog): a stuck agent is not pinged for, and
// systemd restarts it.
func watchdog(a *agent.Agent) func(context.Context) error {
	return func(ctx context.Context) error {
		return a.FeedWatchdog(ctx, sdnotify.WatchdogInterval(), func() { _ = sdnotify.Watchdog() })
	}
}
