package ratelimit

import (
	"context"
	"io"

	"github.com/ferrylabs/ferry/internal/store"
)

// Uploads returns st with the bodies it sends (Put, UploadPart) paced by l,
// as restic's limiter backend wraps its backend once: every caller that
// writes through the result shares the cap, and none has to remember it.
// A retried request's body, rewound, is paced again, as it is sent again.
// A nil l returns st itself.
func Uploads(st store.Store, l *Limiter) store.Store {
	if l == nil {
		return st
	}
	return &limited{Store: st, send: l}
}

// Downloads returns st with the bodies it receives (Get) paced by l: each
// read of a body pays for the bytes it returned. A nil l returns st itself.
func Downloads(st store.Store, l *Limiter) store.Store {
	if l == nil {
		return st
	}
	return &limited{Store: st, receive: l}
}

// limited paces the bodies of a store's requests; a nil limiter leaves its
// direction alone. Every call that moves no body goes to Store as it is.
type limited struct {
	store.Store
	send, receive *Limiter
}

var _ store.Store = (*limited)(nil)

// Put sends body at the send rate.
func (s *limited) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	return s.Store.Put(ctx, key, s.paced(ctx, body), size, opts)
}

// UploadPart sends body at the send rate.
func (s *limited) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	return s.Store.UploadPart(ctx, key, uploadID, n, s.paced(ctx, body), size, crc32c)
}

// Get returns a body read at the receive rate.
func (s *limited) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key, off, length)
	if err != nil || s.receive == nil {
		return rc, err
	}
	return pacedBody{Reader: &Body{R: rc, L: s.receive, Ctx: ctx}, Closer: rc}, nil
}

// paced wraps body in a Reader when sends are limited.
func (s *limited) paced(ctx context.Context, body io.ReadSeeker) io.ReadSeeker {
	if s.send == nil {
		return body
	}
	return &Reader{R: body, L: s.send, Ctx: ctx}
}

// pacedBody is a paced GET body that closes the original.
type pacedBody struct {
	io.Reader
	io.Closer
}
