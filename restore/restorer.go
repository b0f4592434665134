package restore

import (
	"context"
	"os"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/zeebo/blake3"
)

// restorer holds the state of one Restore call.
type restorer struct {
	opts  Options
	store store.Store
	// bucket is the object store itself, store's source when peers serve
	// (packed files are always read from it).
	bucket store.Store
	log    *zap.Logger
	queue  *queue
	// inflight is the byte budget of the GETs in flight; bufs are the copy
	// buffers by size class (see getBuffer).
	inflight *budget
	bufs     [len(bufClasses)]sync.Pool
	ttfb     ttfbMeter // sizes the worker pool (adapt.go)
	hashBufs sync.Pool
	root     *os.Root // the target directory; all writes go through it
	// dirRoots are folders of the target opened as roots of their own,
	// once each (dirRoot), so that creating and renaming a file there is
	// one system call rather than a walk from the target's root.
	dirRoots sync.Map // root-relative folder -> *os.Root

	mu         sync.Mutex
	done       int64
	total      int64
	kept       int
	downloaded int
	direct     int
	fetched    int64
	// Directories to fsync at the end: root-relative ones whose entries
	// changed, and absolute parents of a target directory this run made.
	syncDirs    map[string]bool
	syncOutside []string
	// Directories this run created, for removal if it fails.
	madeInside  []string // root-relative
	madeOutside []string // the target directory and its missing parents
	// staged are the verified files waiting for commit (commit.go).
	staged []*stagedFile
	// beforeCommit, when set, runs once every file is verified and
	// staged, before the step is placed; its error fails the restore with
	// nothing placed (crosscheck.go).
	beforeCommit func(context.Context) error
}

func newRestorer(opts Options, p *plan, growBudget bool) *restorer {
	r := &restorer{opts: opts, store: opts.Store, bucket: opts.Store, log: opts.Logger, queue: newQueue(), syncDirs: map[string]bool{}}
	r.inflight = newBudget(opts.InFlightBytes, growBudget)
	r.hashBufs.New = func() any { return &hashScratch{buf: make([]byte, hashBufSize), h: blake3.New()} }
	for _, f := range p.files {
		r.total += f.file.Size
	}
	return r
}

// run writes the plan: directories, then every file verified and staged,
// then the step placed as a whole (commit), then directory fsyncs.
func (r *restorer) run(ctx context.Context, p *plan) (err error) {
	defer func() {
		if err != nil {
			r.discardStaged()
			r.removeMadeDirs()
		}
		r.dirRoots.Range(func(_, v any) bool {
			v.(*os.Root).Close()
			return true
		})
		if r.root != nil {
			r.root.Close()
		}
	}()
	if err := r.openRoot(p); err != nil {
		return err
	}
	if err := r.removeStale(p); err != nil {
		return err
	}
	if err := r.fetchAll(ctx, p); err != nil {
		return err
	}
	if r.beforeCommit != nil {
		if err := r.beforeCommit(ctx); err != nil {
			return err
		}
	}
	if err := r.commit(p); err != nil {
		return err
	}
	return r.syncAllDirs(ctx)
}

// fetchAll restores every planned file. A pool of workers (adapt.go: 16,
// growing to Concurrency with the time to first byte) serves ranged GETs
// for all files, within the byte budget; each file has its own goroutine
// that checks an existing copy, hashes behind the download and places the
// result. Open files are twice the base pool plus one for each worker the
// pool grew by, which bounds file descriptors and read-back buffers however
// many files the checkpoint has.
func (r *restorer) fetchAll(ctx context.Context, p *plan) error {
	// The workers see the group's context: the first failing file stops
	// every GET, not just its own.
	g, gctx := errgroup.WithContext(ctx)
	stop := context.AfterFunc(gctx, r.queue.close)
	defer stop()
	files := newFileGate(r.opts.Concurrency)
	var workers sync.WaitGroup
	workers.Go(func() { r.runWorkers(gctx, files) })
	defer func() {
		r.queue.close()
		workers.Wait()
	}()

	for _, un := range planUnits(p, r.opts.ChunkSize) {
		if err := files.Acquire(gctx, 1); err != nil {
			break
		}
		g.Go(func() error {
			defer files.Release(1)
			if un.run != nil {
				return r.restoreRun(gctx, un.run)
			}
			return r.restoreFile(gctx, &p.files[un.seq], un.seq)
		})
	}
	return g.Wait()
}

// progress reports that upto bytes of job are downloaded and hashed (a
// second download after a hash mismatch reports nothing until it passes the
// first). Workers of the same file call it concurrently.
func (r *restorer) progress(job *fileJob, upto int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if upto <= job.reported {
		return
	}
	delta := upto - job.reported
	job.reported = upto
	r.done += delta
	if r.opts.Progress != nil {
		r.opts.Progress(r.done, r.total)
	}
}
