package restore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// LatestStep asks Restore for the highest committed step.
const LatestStep int64 = -1

// Defaults for zero Options fields. 32 MiB ranges rather than the push's
// 64 MiB parts: against versitygw on this project's 2-core VM the server
// spent 1.1-1.4 s of CPU serving 8 x 256 MiB in 32 MiB ranges and
// 2.3-2.8 s in 64 MiB ranges (4 alternated runs each, restore wall
// 2.1-2.3 s against 2.6-3.0 s); 16 MiB ranges were no better than 32.
const (
	DefaultConcurrency = 256
	DefaultChunkSize   = 32 << 20
	// DefaultInFlightChunks sizes the default byte budget of the GETs in
	// flight: 16 chunks of the chunk size (512 MiB). Small files, each a
	// GET and a round trip, get up to Concurrency GETs at once; big ones
	// 16 ranges, as before.
	DefaultInFlightChunks = 16
	// budgetGrowth is how many times the default byte budget grows with
	// the worker pool across the internet: one connection carries only
	// so much (window over round trip), so at 80 ms 16 ranges in flight
	// would cap a restore at 16 connections' worth. Growth adds a chunk
	// of budget per worker added.
	budgetGrowth = 4
)

// Options say what to restore where.
type Options struct {
	// Store and Prefix locate the checkpoints (the bucket is inside Store).
	Store  store.Store
	Prefix string
	// Dir is the target directory, created if missing. It may itself be a
	// symlink.
	Dir string
	// Step is the step to restore; LatestStep (any negative value) means
	// the highest committed step. Note that the zero value is step 0.
	Step int64
	// Concurrency caps the ranged GETs in flight across all files
	// (default DefaultConcurrency). What is in flight is sized by bytes
	// (InFlightBytes): a GET takes its range's length from the budget.
	// Memory is a copy buffer per GET sized to its range (at most 1 MiB,
	// so about InFlightBytes/ChunkSize MiB for big files and Concurrency x
	// 64-256 KiB for small ones) plus a 256 KiB read-back buffer for each
	// existing file being checked.
	Concurrency int
	// InFlightBytes bounds the bytes of the GETs in flight. The default,
	// DefaultInFlightChunks x ChunkSize, grows by a chunk for each worker
	// the pool grows by (adapt.go), up to budgetGrowth times; a value set
	// here is fixed.
	InFlightBytes int64
	// ChunkSize is the size of one ranged GET (default DefaultChunkSize),
	// rounded down to a power of two (at least 1 KiB) so that every chunk
	// is a subtree of the file's BLAKE3 tree and is hashed by the worker
	// that fetches it. It does not size any buffer: bodies are streamed to
	// disk.
	ChunkSize int64
	// DirectIO writes the files with direct I/O where the filesystem
	// supports it: far less CPU and memory bandwidth, but the files are
	// not in the page cache afterwards, so a trainer that reads them right
	// away reads them back from disk. By default they go through the page
	// cache, where the trainer finds them.
	DirectIO bool
	// Fsync makes the restore durable before it returns: every file is
	// fsynced before its rename and every changed directory once at the
	// end. Without it the kernel writes the data back in its own time;
	// every file is still verified against its BLAKE3 before its rename,
	// and a later restore re-verifies a file it finds at a final path
	// before keeping it, so a crash that loses unsynced data can never
	// leave the trainer reading wrong bytes after the entrypoint's restore.
	Fsync bool
	// Ranks, when set, selects the ranked files to restore; files with a nil
	// Rank are shared by all ranks and always restored, as are symlinks.
	Ranks func(rank *int) bool
	// Nodes, when positive, restores what node NodeRank of a Nodes-node job
	// needs of the step, as SelectForNode decides from its manifest. It
	// excludes Ranks.
	Nodes, NodeRank int
	// Paths, when set, selects the files (and links) to restore by their
	// manifest paths (restore --include, --exclude); it combines with Ranks
	// and Nodes. A link whose target is not restored is left out too.
	Paths *PathFilter
	// AllowNoMatch lets an include pattern of Paths match no file;
	// otherwise the restore fails before fetching anything (a typo).
	AllowNoMatch bool
	// PlanOnly finds, checks and plans the restore (manifest read and
	// validated, files selected, every target path checked) and returns
	// what it would restore in Result.Files and Result.Bytes, writing
	// nothing and fetching no object.
	PlanOnly bool
	// LowSpeedLimit (bytes/s) and LowSpeedTime bound a slow GET: a body
	// delivering less than LowSpeedLimit over LowSpeedTime is cut and the
	// range fetched again, a few times at most, so a trickling server
	// fails the restore in minutes with a clear error. Zero means
	// DefaultLowSpeedLimit and DefaultLowSpeedTime; a negative limit
	// disables the guard.
	LowSpeedLimit int64
	LowSpeedTime  time.Duration
	// Peers, when set, is called once the restore is planned, with the
	// files it will fetch and those already in place (PeerRequest), and
	// returns the store their bytes are read from: a cooperative source
	// (peer.Node.Join) that takes ranges from other nodes restoring the
	// same step. Every file is verified against its BLAKE3 as always;
	// after a mismatch the source is told, if it is a Distruster, before
	// the file is fetched again.
	Peers func(ctx context.Context, req PeerRequest) (store.Store, error)
	// Fallback, when the latest step is asked for (LatestStep), restores
	// the newest restorable committed step when newer ones are damaged
	// (ErrDamaged): each one skipped is in Result.Skipped and logged at
	// warn. Without it a damaged latest step fails the restore. Steps the
	// bucket records as damaged are skipped without being read.
	Fallback bool
	// NoRecord keeps a restore that finds a step damaged from recording
	// it in the bucket (remote.RecordDamage, create-only), which every
	// later restore of the latest step then honours. RecordBy names the
	// finder in the record.
	NoRecord bool
	RecordBy string
	// Barrier, when set with two nodes or more, makes a restore of the
	// latest step place it only once every node of the job has verified
	// its own files of it (barrier.go); Result.Barrier says what it did.
	Barrier *Barrier
	// latest is set when the step restored was chosen as the latest
	// (LatestStep): the step is then placed only if every node can
	// restore it (crosscheck.go).
	latest bool
	// barrierSteps collects what the barrier did at each step tried.
	barrierSteps *[]BarrierStep
	// Logger receives progress and retry messages (default: none).
	Logger *zap.Logger
	// Progress, when set, is called with the bytes done so far (kept files,
	// and downloaded bytes as they are written and hashed; a file's hash is
	// checked once its last byte is in) and the total bytes of the selected files.
	// Calls are serialized and done never decreases.
	Progress func(done, total int64)
}

// PeerRequest is what a cooperative source is told before the download.
type PeerRequest struct {
	Step int64
	// Chunk is the size of the restore's ranged GETs: every GET asks for
	// one range (at offsets that are multiples of Chunk), or the rest of
	// one after a retry, and for one byte past the end of an object.
	Chunk int64
	// Fetch are the files to download, in the order the restore fetches
	// them. Packed files are in neither Fetch nor Held: they are read
	// from the bucket.
	Fetch []manifest.File
	// Held are the files already in place with the manifest's size, which
	// the restore re-verifies and keeps (or fetches, if their bytes
	// differ).
	Held []heldfile.File
	// Dir is the target directory, absolute.
	Dir string
}

// Result describes a finished restore.
type Result struct {
	// Step is the step restored.
	Step int64
	// Files is the number of files selected; Kept were already correct on
	// disk and Downloaded were fetched. Files == Kept + Downloaded.
	Files, Kept, Downloaded int
	// Direct is how many of the Downloaded files were written with direct
	// I/O; the others went through the page cache (the default, or a
	// filesystem without direct I/O).
	Direct int
	// Symlinks is the number of manifest symlinks in place.
	Symlinks int
	// Dangling names the links placed ("path -> target") whose target
	// neither the step nor the target folder holds (a link into another
	// step): each was warned about before anything was placed.
	Dangling []string
	// Bytes is the size of the selected files; BytesDownloaded counts the
	// bytes actually fetched, retries included.
	Bytes, BytesDownloaded int64
	// Manifest is the manifest restored.
	Manifest *manifest.Manifest
	// Selection describes what was selected with Options.Nodes.
	Selection *Selection
	// Plan, with Options.PlanOnly, is what the restore would do.
	Plan *Plan
	// Skipped are the damaged steps the restore did not restore, newest
	// first: with Options.Fallback the steps passed over to reach Step,
	// otherwise the damaged step that failed it.
	Skipped []Skipped
	// Barrier is what Options.Barrier did at each step it waited at.
	Barrier []BarrierStep
	// NewerData, when positive, is a step above the latest committed one
	// (LatestStep) that has objects without a manifest: an upload in
	// flight or left unfinished, or a deleted manifest (warned about).
	NewerData int64
}

// Restore restores one committed step into opts.Dir. It returns an error
// wrapping remote.ErrNoCheckpoint when the step (or, for LatestStep, any
// step) is not committed, and context.Canceled when ctx is cancelled; after
// any error, final paths hold either their previous content or verified new
// content, and no temp files remain (if the process is killed instead, the
// next restore into the directory removes them).
func Restore(ctx context.Context, opts Options) (Result, error) {
	if opts.Store == nil {
		return Result{}, errors.New("restore: no store")
	}
	if opts.Dir == "" {
		return Result{}, errors.New("restore: no target directory")
	}
	if opts.Nodes > 0 && opts.Ranks != nil {
		return Result{}, errors.New("restore: select ranks or a node, not both")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	growBudget := opts.InFlightBytes <= 0
	if growBudget {
		opts.InFlightBytes = DefaultInFlightChunks * opts.ChunkSize
	}
	opts.InFlightBytes = max(opts.InFlightBytes, minGetWeight)
	if opts.LowSpeedLimit == 0 {
		opts.LowSpeedLimit = DefaultLowSpeedLimit
	}
	if opts.LowSpeedTime <= 0 {
		opts.LowSpeedTime = DefaultLowSpeedTime
	}
	// Chunks are hashed as subtrees of the file's BLAKE3 tree, which needs
	// a power-of-two size.
	opts.ChunkSize = blake3tree.RangeSize(opts.ChunkSize)
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	var err error
	if opts.Barrier, err = opts.Barrier.check(); err != nil {
		return Result{}, err
	}
	if opts.Step < 0 {
		var steps []BarrierStep
		opts.barrierSteps = &steps
		res, err := restoreLatest(ctx, opts, growBudget)
		res.Barrier = steps
		return res, err
	}
	res, err := restoreStep(ctx, opts, growBudget)
	var de *DamagedError
	if errors.As(err, &de) {
		s := recordDamage(ctx, opts, de)
		res.Skipped = []Skipped{s}
		opts.Logger.Warn("step is damaged", zap.Int64("step", s.Step), zap.String("path", s.Path),
			zap.String("key", s.Key), zap.String("reason", s.Reason), zap.String("record", s.Record))
	}
	return res, err
}

// restoreStep restores opts.Step, which is a step number. A damaged step
// fails with a *DamagedError (wrapped).
func restoreStep(ctx context.Context, opts Options, growBudget bool) (Result, error) {
	m, rtt, err := find(ctx, opts)
	if err != nil {
		return Result{Step: opts.Step}, manifestDamage(opts.Prefix, opts.Step, err)
	}
	res, err := restoreManifest(ctx, opts, m, rtt, growBudget)
	var de *DamagedError
	if errors.As(err, &de) {
		de.Step = m.Step
	}
	if err != nil {
		return res, fmt.Errorf("restore step %d: %w", m.Step, err)
	}
	return res, nil
}

func restoreManifest(ctx context.Context, opts Options, m *manifest.Manifest, rtt time.Duration, growBudget bool) (Result, error) {
	res := Result{Step: m.Step, Manifest: m}
	ranks := opts.Ranks
	if opts.Nodes > 0 {
		sel, err := SelectForNode(m, opts.Nodes, opts.NodeRank)
		if err != nil {
			return res, err
		}
		res.Selection = &sel
		opts.Logger.Info("restoring what this node needs", zap.Int("node_rank", opts.NodeRank), zap.Int("nodes", opts.Nodes), zap.Stringer("selection", sel))
		if !sel.All {
			ranks = sel.Ranks.Filter()
		}
	}
	want, wantLink, err := selection(m, opts, ranks)
	if err != nil {
		return res, err
	}
	p, err := makePlan(m, opts.Dir, want, wantLink)
	if err != nil {
		return res, err
	}
	r := newRestorer(opts, p, growBudget)
	r.ttfb.seed = rtt
	ctx, checked := guardLatest(ctx, r, m, p, ranks)
	res.Files, res.Bytes = len(p.files), r.total
	if opts.PlanOnly {
		plan := summarize(p, r.opts.ChunkSize)
		res.Plan = &plan
		return res, nil
	}
	if opts.Peers != nil {
		fetch, held := p.split()
		st, err := opts.Peers(ctx, PeerRequest{Step: m.Step, Chunk: r.opts.ChunkSize, Fetch: fetch, Held: held, Dir: p.root})
		if err != nil {
			return res, err
		}
		r.store = st
	}
	for _, d := range p.dangling {
		r.log.Warn("a link of the step points at a file neither the step nor the target folder holds: it dangles until that file is there (a link into another step: restore that step too, or save the file in this one)",
			zap.Int64("step", m.Step), zap.String("link", d))
	}
	res.Dangling = p.dangling
	r.log.Info("restoring checkpoint", zap.Int64("step", m.Step), zap.String("dir", p.root),
		zap.Int("files", len(p.files)), zap.Int64("bytes", r.total), zap.Int("symlinks", len(p.links)))

	err = checked(r.run(ctx, p))
	res.Kept, res.Downloaded, res.Direct, res.BytesDownloaded = r.kept, r.downloaded, r.direct, r.fetched
	if err != nil {
		return res, err
	}
	res.Symlinks = len(p.links)
	r.log.Info("restored checkpoint", zap.Int64("step", m.Step), zap.Int("kept", r.kept),
		zap.Int("downloaded", r.downloaded), zap.Int64("bytes_downloaded", r.fetched))
	return res, nil
}
