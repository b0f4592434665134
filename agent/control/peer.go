package control

// Who is calling. The control socket may be open to a group
// (--control-group), and the members of that group are not all allowed to
// see or drive this agent: a user who cannot read the watch dir must learn
// nothing of its steps, and must not declare one. Every connection's
// credentials are read from the kernel when it is accepted (SO_PEERCRED:
// the caller's uid and gid at connect(2), which it cannot forge), and
// each request is answered only if the Server's Authorizer allows them.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	"go.uber.org/zap"
)

// Peer is the process on the other end of a control connection, as the
// kernel saw it when it connected.
type Peer struct {
	// Known is false where the platform gives no credentials (not Linux).
	Known bool
	PID   int32
	UID   uint32
	GID   uint32
	// Groups are the caller's supplementary groups (SO_PEERGROUPS); nil
	// where the kernel does not tell them (before Linux 4.13), and then
	// only GID counts.
	Groups []uint32
}

// InGroup reports whether gid is the caller's primary or a supplementary
// group.
func (p Peer) InGroup(gid uint32) bool {
	if p.GID == gid {
		return true
	}
	for _, g := range p.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// ErrRefused is the client's error when the agent refuses to answer this
// user.
var ErrRefused = errors.New("the agent refuses to answer this user")

// Authorizer returns nil if peer may use the agent's control socket, else
// why not (said to the caller in one line).
type Authorizer func(Peer) error

// SetAuthorizer sets who the server answers (default OwnerOnly). Call it
// before Serve.
func (s *Server) SetAuthorizer(a Authorizer) { s.authorize = a }

// OwnerOnly answers root and this process's user alone.
func OwnerOnly(p Peer) error {
	if p.Known && (p.UID == 0 || int(p.UID) == os.Geteuid()) {
		return nil
	}
	return fmt.Errorf("only root and the agent's user (uid %d) are answered", os.Geteuid())
}

type peerKey struct{}

// connPeer is the http.Server's ConnContext: it reads the connection's
// credentials once, when it is accepted.
func connPeer(ctx context.Context, c net.Conn) context.Context {
	var p Peer
	var err error
	// The connection limits wrap each accepted connection (limits.go).
	for {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	if uc, ok := c.(*net.UnixConn); ok {
		p, err = peerOf(uc)
	} else {
		err = fmt.Errorf("not a unix socket connection (%T)", c)
	}
	return context.WithValue(ctx, peerKey{}, peerResult{p, err})
}

type peerResult struct {
	p   Peer
	err error
}

// guard answers a request only if its caller is allowed; a refusal is one
// line (403), and the log counts who was refused without the request.
func (s *Server) guard(next http.Handler) http.Handler {
	auth := s.authorize
	if auth == nil {
		auth = OwnerOnly
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, _ := r.Context().Value(peerKey{}).(peerResult)
		err := pr.err
		switch {
		case err != nil:
		case !pr.p.Known:
			err = s.unknownPeer()
		default:
			err = auth(pr.p)
		}
		if err != nil {
			s.log.Warn("control request refused", zap.String("path", r.URL.Path),
				zap.Uint32("uid", pr.p.UID), zap.Int32("pid", pr.p.PID), zap.Error(err))
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unknownPeer decides for a caller the platform cannot name (not Linux):
// answered only while the socket is the agent's user's alone (mode 0600),
// since then the file's mode already let no one else connect.
func (s *Server) unknownPeer() error {
	fi, err := os.Lstat(s.path)
	if err != nil {
		return fmt.Errorf("cannot tell who is calling: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return errors.New("cannot tell who is calling on this platform, and the socket is open to others")
	}
	return nil
}
