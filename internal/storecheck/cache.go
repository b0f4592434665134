package storecheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/atomicfile"
	"github.com/ferrylabs/ferry/internal/store"
)

// MaxAge is how long a proof is trusted before the store is checked again:
// a bucket can move to another server (or another release of it) behind
// the same endpoint.
const MaxAge = 30 * 24 * time.Hour

// Cache remembers the stores proven to enforce conditional writes, one
// small file per endpoint and bucket under Dir (the state dir's "stores"
// folder). A zero Cache remembers nothing: every check runs.
type Cache struct {
	Dir string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// entry is one cache file.
type entry struct {
	Endpoint string    `json:"endpoint"`
	Bucket   string    `json:"bucket"`
	Checked  time.Time `json:"conditional_writes_checked"`
}

func (c Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// path is the file of t's endpoint and bucket.
func (c Cache) path(t Target) string {
	sum := sha256.Sum256([]byte(t.Endpoint + "\x00" + t.Bucket))
	return filepath.Join(c.Dir, hex.EncodeToString(sum[:8])+".json")
}

// Proven reports whether t's store was proven within MaxAge.
func (c Cache) Proven(t Target) bool {
	if c.Dir == "" {
		return false
	}
	raw, err := os.ReadFile(c.path(t))
	if err != nil {
		return false
	}
	var e entry
	if json.Unmarshal(raw, &e) != nil || e.Endpoint != t.Endpoint || e.Bucket != t.Bucket {
		return false
	}
	age := c.now().Sub(e.Checked)
	return age >= 0 && age < MaxAge
}

// Record notes that t's store was proven now.
func (c Cache) Record(t Target) error {
	if c.Dir == "" {
		return nil
	}
	raw, err := json.MarshalIndent(entry{Endpoint: t.Endpoint, Bucket: t.Bucket, Checked: c.now().UTC()}, "", "  ")
	if err != nil {
		return err
	}
	// Losing it costs one check again, never a wrong answer: no fsync.
	return atomicfile.WriteCached(c.path(t), append(raw, '\n'), 0o600)
}

// Forget removes t's entry, so that the next Ensure checks again.
func (c Cache) Forget(t Target) error {
	if c.Dir == "" {
		return nil
	}
	if err := os.Remove(c.path(t)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Ensure checks t's store with ConditionalWrites unless the cache holds a
// recent proof, and records a new one. It reports whether the cache
// answered. A cache that cannot be written costs a check at the next run,
// which it logs.
func Ensure(ctx context.Context, st store.Store, t Target, c Cache, log *zap.Logger) (cached bool, err error) {
	if log == nil {
		log = zap.NewNop()
	}
	if c.Proven(t) {
		log.Debug("the store was proven to enforce conditional writes before", zap.String("store", t.Name()), zap.String("cache", c.path(t)))
		return true, nil
	}
	start := time.Now()
	err = ConditionalWrites(ctx, st, t)
	var left *LeftError
	if errors.As(err, &left) {
		log.Warn("could not delete the scratch objects of the conditional-write check; delete them by hand (ferry needs no DELETE to push)",
			zap.Strings("keys", left.Keys), zap.Error(left.Err))
		err = nil
	}
	if err != nil {
		return false, err
	}
	log.Info("checked the store: it refuses a second create-only PUT and a stale If-Match, as ferry's commit needs",
		zap.String("store", t.Name()), zap.Duration("took", time.Since(start).Round(time.Millisecond)))
	if err := c.Record(t); err != nil {
		log.Warn("could not remember the conditional-write check; it runs again next time", zap.Error(fmt.Errorf("cache: %w", err)))
	}
	return false, nil
}
