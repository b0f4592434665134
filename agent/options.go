package agent

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/uploader"
)

// WhenBehind policies: which waiting step goes next.
const (
	// NewestFirst uploads the newest complete step first and older ones
	// after it, so the newest durable step lags the trainer by at most the
	// upload in flight plus its own.
	NewestFirst = "newest"
	// OldestFirst uploads in step order: every step, the newest last.
	OldestFirst = "oldest"
	// SkipSuperseded uploads the newest complete step and never the older
	// ones still waiting when a newer one is complete (state "skipped").
	SkipSuperseded = "skip"
)

// Defaults for zero Options.
const (
	DefaultDrainTimeout = 10 * time.Minute
	DefaultRetryMin     = 2 * time.Second
	DefaultRetryMax     = 5 * time.Minute
)

// Options configure an Agent.
type Options struct {
	// Store and Prefix say where checkpoints go; URL is the same place as
	// s3://bucket/prefix, for status and for naming upload state.
	Store  store.Store
	Prefix string
	URL    string
	// Detect configures the watcher; Dir is the watched directory.
	Detect detect.Options
	// Upload configures the uploader (part size, concurrency, bandwidth).
	// Store, State and Logger are set by the agent.
	Upload uploader.Options
	// StateDir holds the journal and upload state of this agent alone
	// (required): AgentStateDir gives each destination and watched
	// directory its own. New records the agent's Identity in it and
	// refuses a folder that belongs to another.
	StateDir string
	// AllowEmpty commits steps that have no files; without it such a step
	// fails and is never committed (uploader.PushOptions.AllowEmpty).
	AllowEmpty bool
	// MetricsAddr is where the metrics endpoint listens, for status ("" if
	// none).
	MetricsAddr string
	// KeepLocal, when > 0, deletes the local files of committed steps
	// beyond the KeepLocal newest committed ones. 0 never deletes anything.
	KeepLocal int
	// Nodes and NodeRank place this agent in a multi-node job: each node
	// pushes its files and part manifest, and the node completing the set
	// commits the step (uploader.PushOptions). 0 or 1 node commits directly.
	Nodes, NodeRank int
	// Run identifies this incarnation of a multi-node job
	// (uploader.Destination.Run).
	Run string
	// KeepRemote, when > 0, prunes the bucket after each commit this agent
	// writes, keeping the KeepRemote newest steps (prune.Policy.KeepLast,
	// default grace periods). 0 never deletes anything remote.
	KeepRemote int
	// KeepRemoteEvery, when > 0, also keeps every step divisible by it
	// (prune.Policy.KeepEvery), as ferry prune --keep-every does.
	KeepRemoteEvery int64
	// DrainTimeout bounds how long Run keeps uploading after its context
	// is cancelled.
	DrainTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between attempts of a step.
	RetryMin, RetryMax time.Duration
	// Pipeline sends the whole parts of large files while the trainer
	// writes them (uploader.Destination.SendEarly), so that once a step is
	// complete only its last parts and the verification remain. A part is
	// committed only if the file's final bytes hash to what was sent.
	Pipeline bool
	// WhenBehind orders the steps waiting for upload when the link falls
	// behind the trainer: NewestFirst (the default), OldestFirst or
	// SkipSuperseded.
	WhenBehind string
	// OnCommit is the commit hook (hook.go); its zero value runs none.
	OnCommit HookOptions
	// ReadyStoreTimeout is how long the store's requests may go
	// unanswered before Ready fails (default DefaultReadyStoreTimeout).
	ReadyStoreTimeout time.Duration
	// Requests, when set, returns S3 request counts by operation for status.
	Requests func() map[string]int64
	Metrics  *control.Metrics
	Logger   *zap.Logger
}

// withDefaults fills the zero fields of o and checks WhenBehind.
func (o Options) withDefaults() (Options, error) {
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.RetryMin <= 0 {
		o.RetryMin = DefaultRetryMin
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultRetryMax
	}
	switch o.WhenBehind {
	case "":
		o.WhenBehind = NewestFirst
	case NewestFirst, OldestFirst, SkipSuperseded:
	default:
		return o, fmt.Errorf("agent: WhenBehind %q: want %s, %s or %s", o.WhenBehind, NewestFirst, OldestFirst, SkipSuperseded)
	}
	if o.ReadyStoreTimeout <= 0 {
		o.ReadyStoreTimeout = DefaultReadyStoreTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}

// identity is what this agent uploads, as recorded in its state dir.
func (o *Options) identity() Identity {
	return Identity{Destination: o.URL, Watch: CanonicalDir(o.Detect.Dir)}
}
