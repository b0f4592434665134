package s3store

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/ctxtime"
	"github.com/ferrylabs/ferry/internal/store"
)

// A conditional PUT answered 429 Too Many Requests. R2 allows about one
// write a second to a key and answers more with 429 (error 10058); writers
// racing a create-only PUT of one key, as the nodes of a job claiming the
// merge of a step they finished together, all meet it at once. Retried
// blindly, each loser waits for a write slot of its own only to learn 412:
// N racers take N seconds, and those past the retry budget fail. But a 429
// says that another writer wrote the key moments ago, so the store waits a
// little, reads the key (a HEAD: reads are not limited so) and answers the
// PUT as a lost race when its precondition already fails against what is
// there: the key exists for If-None-Match, or holds another ETag (or
// nothing) for If-Match. Otherwise it sends the PUT again. As with a 412
// that follows an attempt whose answer was lost, the object found may be
// this PUT's own: callers of conditional writes already read what is there
// after losing.

// putConditional sends a conditional PUT; a 429 is resolved as above
// rather than retried by the SDK. lost reports a PUT answered as a lost
// race from what a HEAD found.
func (s *Store) putConditional(ctx context.Context, in *s3.PutObjectInput, body io.ReadSeeker, size int64, opts store.PutOptions) (out *s3.PutObjectOutput, lost bool, err error) {
	key := aws.ToString(in.Key)
	for attempt := 1; ; attempt++ {
		out, err = s.client.PutObject(ctx, in, unsignedPayload, withoutRetryOn429)
		if err == nil || httpStatus(err) != http.StatusTooManyRequests || attempt >= s.maxAttempts {
			return out, false, err
		}
		if serr := ctxtime.Sleep(ctx, throttleBackoff(attempt)); serr != nil {
			return nil, false, err
		}
		if s.preconditionFails(ctx, key, opts) {
			s.log.Debug("conditional put answered 429; the key no longer meets its precondition: lost",
				zap.String("key", key), zap.Int("attempt", attempt))
			return nil, true, err
		}
		if rerr := rewind(body, size); rerr != nil {
			return nil, false, rerr
		}
	}
}

// preconditionFails reports whether the object now at key fails the
// precondition of opts, from a HEAD. When the HEAD fails it reports false:
// the PUT is then tried again and the server decides.
func (s *Store) preconditionFails(ctx context.Context, key string, opts store.PutOptions) bool {
	info, err := s.Head(ctx, key)
	exists := err == nil
	if err != nil && !errors.Is(err, store.ErrNotExist) {
		return false
	}
	if opts.IfNoneMatch && exists {
		return true
	}
	return opts.IfMatch != "" && (!exists || unquote(info.ETag) != unquote(opts.IfMatch))
}

func unquote(etag string) string { return strings.Trim(etag, `"`) }

// throttleBackoff is the pause before looking again after the attempt-th
// 429: between half and all of 0.5 s x 2^(attempt-1), at most maxBackoff.
// The first gives the write that took the key's slot time to land (a small
// PUT takes a round trip or two), so that the HEAD finds it; the next ones
// reach past the second a key waits between writes.
func throttleBackoff(attempt int) time.Duration {
	base := maxBackoff
	if attempt < 7 {
		base = min(500*time.Millisecond<<(attempt-1), maxBackoff)
	}
	return base/2 + rand.N(base/2)
}

// withoutRetryOn429 makes the SDK hand a 429 back instead of retrying it,
// for putConditional to resolve.
func withoutRetryOn429(o *s3.Options) {
	if o.Retryer != nil {
		o.Retryer = no429Retryer{o.Retryer}
	}
}

// no429Retryer is a retryer that retries what its Retryer does, but 429.
type no429Retryer struct{ aws.Retryer }

func (r no429Retryer) IsErrorRetryable(err error) bool {
	return httpStatus(err) != http.StatusTooManyRequests && r.Retryer.IsErrorRetryable(err)
}

// httpStatus returns the HTTP status of an SDK error, 0 if it has none.
func httpStatus(err error) int {
	var withStatus interface{ HTTPStatusCode() int }
	if errors.As(err, &withStatus) {
		return withStatus.HTTPStatusCode()
	}
	return 0
}
