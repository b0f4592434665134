// Package storecheck proves, against a real store, the behaviour ferry's
// commit protocol rests on before ferry trusts it: that a create-only PUT
// (If-None-Match: *) of a key that exists is refused, and that a PUT with
// an If-Match ETag the object does not have is refused. A store that
// ignores either (AWS S3 did until August 2024; older releases of several
// S3-compatible servers still do) silently turns a create-only commit into
// last-writer-wins: two pushes of one step with different content would
// both believe they committed, and a committed manifest could be replaced.
//
// The check writes two scratch objects under the destination's prefix
// (manifest.ScratchPrefix) and deletes them again; its result is cached per
// endpoint and bucket (Cache), so a store is checked once, not per push.
package storecheck

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/ferrylabs/ferry/internal/ctxtime"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// ErrNotEnforced is returned (wrapped) when the store accepted a
// conditional write it had to refuse, or does not support conditional
// writes at all. The error's text names the store, what it did and what
// would be unsafe.
var ErrNotEnforced = errors.New("the store does not enforce conditional writes")

// Target names the store checked: the endpoint ("" for AWS S3) and bucket
// key the cache, the prefix says where the scratch objects go.
type Target struct {
	Endpoint, Bucket, Prefix string
}

// FileEndpoint is the Endpoint of a folder (file://), whose Bucket is the
// folder's path.
const FileEndpoint = "file://"

// Name describes the store for messages: its bucket and endpoint, or the
// folder.
func (t Target) Name() string {
	if t.Endpoint == FileEndpoint {
		return "folder " + t.Bucket
	}
	ep := t.Endpoint
	if ep == "" {
		ep = "AWS S3"
	}
	return fmt.Sprintf("bucket %q at %s", t.Bucket, ep)
}

// throttlePause is the wait before trying a write again that the store
// answered 429: R2 allows about one write a second to a key, and the check
// writes each of its keys twice.
const throttlePause = time.Second

// maxThrottled bounds the 429s one write of the check accepts.
const maxThrottled = 8

// ConditionalWrites checks that st refuses a second create-only PUT of a
// key and a PUT whose If-Match names an ETag the object does not have. It
// returns nil when both were refused with 412 (or 409), an error wrapping
// ErrNotEnforced when the store accepted either or does not support them,
// and another error when it could not find out (network, permissions).
// The scratch objects are deleted in every case, as far as the store lets:
// a *LeftError says a passed check could not delete them.
func ConditionalWrites(ctx context.Context, st store.Store, t Target) (err error) {
	// written holds the keys a PUT may have created, the ones to delete: a
	// PUT refused outright (a missing bucket, no permission) wrote nothing.
	written := map[string]bool{}
	defer func() {
		// Even when ctx was cancelled: the scratch objects must go.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		var left LeftError
		for _, k := range slices.Sorted(maps.Keys(written)) {
			if !written[k] {
				continue
			}
			if derr := st.Delete(dctx, k); derr != nil {
				left.Keys, left.Err = append(left.Keys, k), derr
			}
		}
		if len(left.Keys) > 0 && err == nil {
			err = &left
		}
	}()

	id, createKey, first, err := createScratch(ctx, st, t, written)
	if err != nil {
		if unsupported(err) {
			return fmt.Errorf("%s: %w: it does not support a create-only PUT (If-None-Match: *): %v; ferry commits every step with one",
				t.Name(), ErrNotEnforced, err)
		}
		return fmt.Errorf("check conditional writes: create-only PUT of %s: %w", createKey, err)
	}
	matchKey := scratchDir(t, id) + "-match"
	_, err = put(ctx, st, matchKey, []byte("ferry conditional-write check "+id+": the object If-Match is tried on\n"), store.PutOptions{})
	written[matchKey] = mayHaveWritten(err)
	if err != nil {
		return fmt.Errorf("check conditional writes: put %s: %w", matchKey, err)
	}

	// The writes that must be refused carry no body: a server answers
	// 412 before reading one, and a body left unread can cost the
	// connection.
	var again []byte
	if err := refused(ctx, st, createKey, again, store.PutOptions{IfNoneMatch: true}); err != nil {
		return describe(t, err, "If-None-Match: * (a second create-only PUT of a key replaced the object)",
			"a committed step's manifest could be overwritten, and two pushes or nodes of one step would each believe they committed")
	}
	sum := md5.Sum(first) // the ETag of other content: the create-only key's
	stale := `"` + hex.EncodeToString(sum[:]) + `"`
	if err := refused(ctx, st, matchKey, again, store.PutOptions{IfMatch: stale}); err != nil {
		return describe(t, err, "If-Match (a PUT naming an ETag the object did not have replaced it)",
			"a revision of a committed step could overwrite another writer's revision")
	}
	return nil
}

// LeftError is ConditionalWrites' answer when the store passed the check
// but its scratch objects could not be deleted (credentials allowed to
// write but not to delete): the proof holds, and Keys are left behind.
type LeftError struct {
	Keys []string
	Err  error
}

func (e *LeftError) Error() string {
	return fmt.Sprintf("the store enforces conditional writes, but the scratch objects %v could not be deleted: %v", e.Keys, e.Err)
}

func (e *LeftError) Unwrap() error { return e.Err }

// errAccepted is what refused reports when the store took the write.
var errAccepted = errors.New("accepted")

// refused sends a conditional write that must fail its precondition: nil
// when the store refused it with 412 (or 409), errAccepted when it wrote
// it, else the error. A 429 is no answer: R2 throttles a second write to a
// key within a second, and the S3 store then guesses 412 from what a HEAD
// finds; the check waits and asks again, so that the store itself answers.
func refused(ctx context.Context, st store.Store, key string, data []byte, opts store.PutOptions) error {
	for attempt := 1; ; attempt++ {
		_, err := put(ctx, st, key, data, opts)
		switch {
		case err == nil:
			return errAccepted
		case httpStatus(err) == http.StatusTooManyRequests && attempt < maxThrottled:
			if serr := ctxtime.Sleep(ctx, throttlePause); serr != nil {
				return serr
			}
			continue
		case errors.Is(err, store.ErrPreconditionFailed) && httpStatus(err) != http.StatusTooManyRequests:
			return nil
		}
		return err
	}
}

// describe turns what refused reported for the condition cond into the
// check's error: unsafe says what would go wrong were it trusted.
func describe(t Target, err error, cond, unsafe string) error {
	switch {
	case errors.Is(err, errAccepted):
		return fmt.Errorf("%s: %w: it ignores %s; trusting it, %s", t.Name(), ErrNotEnforced, cond, unsafe)
	case unsupported(err):
		return fmt.Errorf("%s: %w: it does not support %s: %v; without it, %s", t.Name(), ErrNotEnforced, cond, err, unsafe)
	}
	return fmt.Errorf("check conditional writes: %w", err)
}

func put(ctx context.Context, st store.Store, key string, data []byte, opts store.PutOptions) (store.ObjectInfo, error) {
	opts.CRC32C = store.CRC32C(data)
	return st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
}

// scratchDir is the name the check's scratch keys of id begin with.
func scratchDir(t Target, id string) string {
	return manifest.ScratchPrefix(t.Prefix) + "condwrite-" + id
}

// createTries bounds the fresh keys createScratch tries.
const createTries = 3

// createScratch creates the check's first object create-only, under a
// fresh random key, and records in written each key it may have created.
// A 412 that createOwn cannot confirm as its own earlier attempt (the
// object read back through a failing link, or not yet visible) says
// nothing about the store's conditional writes, since no one else knows
// the key: it tries again under a new key. A store that answers 412 to
// every new key fails after createTries, with its answer.
func createScratch(ctx context.Context, st store.Store, t Target, written map[string]bool) (id, key string, data []byte, err error) {
	for try := 1; ; try++ {
		if id, err = randomID(); err != nil {
			return "", "", nil, err
		}
		key = scratchDir(t, id) + "-create"
		data = []byte("ferry conditional-write check " + id + ": the first write\n")
		err = createOwn(ctx, st, key, data)
		ambiguous := errors.Is(err, store.ErrPreconditionFailed) && httpStatus(err) != http.StatusTooManyRequests
		written[key] = err == nil || ambiguous || mayHaveWritten(err)
		if !ambiguous || try == createTries || ctx.Err() != nil {
			return id, key, data, err
		}
	}
}

// createOwn writes data at key create-only. No one else knows the key (a
// random name), so a 412 means an earlier attempt of this very PUT landed
// and its answer was lost (the store's client sent it again after a reset
// or an idle timeout): when the object holds data, the write is done.
func createOwn(ctx context.Context, st store.Store, key string, data []byte) error {
	_, err := put(ctx, st, key, data, store.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, store.ErrPreconditionFailed) || httpStatus(err) == http.StatusTooManyRequests {
		return err
	}
	rc, gerr := st.Get(ctx, key, 0, -1)
	if gerr != nil {
		return err
	}
	defer rc.Close()
	got, gerr := io.ReadAll(io.LimitReader(rc, int64(len(data))+1))
	if gerr != nil || !bytes.Equal(got, data) {
		return err
	}
	return nil
}

// mayHaveWritten reports whether a PUT that returned err may have created
// its object: not when the store refused it outright with a 4xx (a
// missing bucket, no permission, an unsupported header).
func mayHaveWritten(err error) bool {
	if err == nil {
		return true
	}
	status := httpStatus(err)
	return !errors.Is(err, store.ErrNotExist) && !errors.Is(err, store.ErrNoBucket) && (status < 400 || status >= 500 || status == http.StatusRequestTimeout)
}

// unsupported reports whether err is a server saying it does not know the
// request's headers: 501 Not Implemented, or 400 naming them.
func unsupported(err error) bool {
	if errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrNotExist) {
		return false
	}
	switch httpStatus(err) {
	case http.StatusNotImplemented, http.StatusBadRequest:
		return true
	}
	return false
}

// httpStatus returns the HTTP status found in err's chain, 0 if none.
func httpStatus(err error) int {
	var withStatus interface{ HTTPStatusCode() int }
	if errors.As(err, &withStatus) {
		return withStatus.HTTPStatusCode()
	}
	return 0
}

func randomID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("check conditional writes: random name: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
