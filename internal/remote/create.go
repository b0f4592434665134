package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/ferrylabs/ferry/internal/store"
)

// createOnly writes data at key with a create-only PUT (If-None-Match: *):
// the one conditional create of the protocol, which a step's manifest
// (Commit), a node's part (PutPart) and the merge claim (claimMerge) are
// written with. Each is a small JSON document. It reports whether this
// PUT created the object.
//
// When an object is already at key the PUT changes nothing, and
// createOnly returns created=false with the error of existing, which reads
// what is there and compares it with what the caller meant to write: nil
// when it is the same (the write was done before, by an earlier attempt or
// another node), else the caller's conflict or read error, as the caller
// words it. A nil existing accepts whatever is there unread: a node that
// loses the merge claim only needs to know that it lost. Any other failure
// of the PUT is returned as "<what>: <error>".
func createOnly(ctx context.Context, st store.Store, key string, data []byte, what string, existing func() error) (created bool, err error) {
	_, err = st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{
		IfNoneMatch: true,
		CRC32C:      store.CRC32C(data),
		ContentType: "application/json",
	})
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, store.ErrPreconditionFailed):
		return false, fmt.Errorf("%s: %w", what, err)
	case existing == nil:
		return false, nil
	}
	return false, existing()
}
