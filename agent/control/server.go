package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// controlSocketName is the control socket's file name in the state dir.
const controlSocketName = "agent.sock"

// Errors about who owns a state dir's control socket.
var (
	// ErrNoAgent means no agent answers on the control socket, so `ferry
	// flush` cannot promise anything is durable.
	ErrNoAgent = errors.New("no ferry agent is running")
	// ErrAgentRunning means another agent serves the state dir: two agents
	// would upload the same steps and share one journal.
	ErrAgentRunning = errors.New("another ferry agent is running")
)

// SocketPath is where the agent using stateDir listens for `ferry status`
// and `ferry flush`: one agent per state dir, found without configuration.
func SocketPath(stateDir string) string {
	return filepath.Join(stateDir, controlSocketName)
}

// Server is a control socket that is bound but not yet serving.
// Binding first, before the agent is even built, lets it fail before it
// touches the state dir or uploads anything when another agent owns the
// state dir, and report READY only once `ferry status` can connect.
type Server struct {
	path  string
	ln    *net.UnixListener
	owned os.FileInfo // the socket file we created, to remove only ours
	log   *zap.Logger
	once  sync.Once
	// authorize decides who is answered (peer.go); nil: OwnerOnly.
	authorize Authorizer
	// Limits bound the connections Serve holds (limits.go); set them
	// before Serve, zero fields take the defaults.
	Limits Limits
}

// Listen binds the control socket at path: its directory is made
// owner-only (0700) and the socket 0600, because anyone who can connect can
// read the agent's status. A socket file left by a dead agent is replaced;
// a live agent on it, or a file that is not a socket, is an error.
func Listen(path string, log *zap.Logger) (*Server, error) {
	if log == nil {
		log = zap.NewNop()
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control socket: create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control socket: make %s owner-only: %w", dir, err)
	}
	ln, err := listenUnix(path)
	if errors.Is(err, syscall.EADDRINUSE) {
		if err := removeStaleSocket(path); err != nil {
			return nil, err
		}
		ln, err = listenUnix(path)
		if errors.Is(err, syscall.EADDRINUSE) {
			// Another agent bound it between our check and our listen.
			return nil, fmt.Errorf("%w with state dir %s (socket %s)", ErrAgentRunning, dir, path)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w%s", path, err, socketPathHint(path))
	}
	// We remove the file ourselves, and only if it is still ours: a
	// listener's automatic unlink would remove whatever is at path.
	ln.SetUnlinkOnClose(false)
	owned, err := os.Lstat(path)
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: make it owner-only: %w", path, err)
	}
	return &Server{path: path, ln: ln, owned: owned, log: log}, nil
}

func listenUnix(path string) (*net.UnixListener, error) {
	return net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
}

// removeStaleSocket removes the socket file at path unless something
// answers on it.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("control socket %s: the path exists and is not a socket; remove it if it is not needed", path)
	}
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("%w with state dir %s (socket %s)", ErrAgentRunning, filepath.Dir(path), path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("control socket %s: check for a running agent: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control socket %s: remove stale socket: %w", path, err)
	}
	return nil
}

// socketPathHint explains the most puzzling bind failure: unix socket
// paths are limited to about 100 bytes.
func socketPathHint(path string) string {
	if len(path) < 100 {
		return ""
	}
	return fmt.Sprintf(" (the socket path is %d bytes; unix sockets allow about 100: use a shorter --state-dir)", len(path))
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve answers requests from c until ctx is cancelled, then returns nil
// having closed the listener and removed the socket. Requests in flight,
// such as a long flush, are cancelled with ctx and still answered. Call it
// once.
func (s *Server) Serve(ctx context.Context, c Controller) error {
	defer s.Close()
	h := controlHandler{c: c, log: s.log}
	mux := http.NewServeMux()
	mux.HandleFunc("/status", h.status)
	mux.HandleFunc("/flush", h.flush)
	mux.HandleFunc("/commit", h.commit)
	srv := &http.Server{
		Handler:     s.guard(mux),
		ConnContext: connPeer,
		// Read, header and idle timeouts: Limits.apply.
		// Request contexts derive from ctx: a flush in progress ends when
		// the agent stops instead of holding up the shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    zap.NewStdLog(s.log.Named("control")),
	}
	s.log.Info("control socket listening", zap.String("path", s.path))
	ln := s.Limits.apply(srv, s.ln, s.log)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() { errc <- srv.Serve(ln) })
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("control socket %s: %w", s.path, err)
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutCtx); serr != nil {
		srv.Close()
	}
	wg.Wait()
	return err
}

// Close stops listening and removes the socket file if it is still ours.
// Serve calls it; call it yourself only if you never call Serve.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		err = s.ln.Close()
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		if fi, serr := os.Lstat(s.path); serr == nil && os.SameFile(fi, s.owned) {
			if rerr := os.Remove(s.path); rerr != nil && err == nil {
				err = fmt.Errorf("control socket: remove %s: %w", s.path, rerr)
			}
		}
	})
	return err
}

// controlHandler answers the control requests from a Controller.
type controlHandler struct {
	c   Controller
	log *zap.Logger
}

func (h controlHandler) status(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	writeControlJSON(w, http.StatusOK, h.c.Status())
}

// flushResponse is the answer to POST /flush.
type flushResponse struct {
	Committed    bool    `json:"committed"`
	NotCommitted []int64 `json:"not_committed"`
	// Error says why not everything is committed, when known.
	Error string `json:"error,omitempty"`
}

func (h controlHandler) flush(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	var timeout time.Duration
	if v := r.URL.Query().Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			http.Error(w, fmt.Sprintf("timeout %q: want a duration such as 15m", v), http.StatusBadRequest)
			return
		}
		timeout = d
	}
	// r.Context() ends when the client disconnects or the agent stops.
	ctx := r.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	h.log.Info("flush requested", zap.Duration("timeout", timeout))
	steps, err := h.c.Flush(ctx)
	resp := flushResponse{Committed: err == nil && len(steps) == 0, NotCommitted: steps}
	switch {
	case resp.Committed:
	case r.Context().Err() != nil:
		// The client left or the agent is stopping; whoever is left to
		// read this learns the agent stopped.
		resp.Error = "the agent is stopping"
	case errors.Is(err, ErrStarting):
		resp.Error = fmt.Sprintf("flush timed out after %v: %v", timeout, ErrStarting)
	case errors.Is(err, context.DeadlineExceeded):
		resp.Error = fmt.Sprintf("flush timed out after %v", timeout)
		var w *WaitingError
		if errors.As(err, &w) && w.For != "" {
			resp.Error += "; still waiting for " + w.For
		}
	case err != nil:
		resp.Error = err.Error()
	}
	if resp.NotCommitted == nil {
		resp.NotCommitted = []int64{}
	}
	h.log.Info("flush answered", zap.Bool("committed", resp.Committed),
		zap.Int64s("not_committed", resp.NotCommitted), zap.Duration("took", time.Since(start)))
	writeControlJSON(w, http.StatusOK, resp)
}

func writeControlJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// commitResponse is the answer to POST /commit.
type commitResponse struct {
	Durable bool   `json:"durable"`
	Error   string `json:"error,omitempty"`
}

// commit serves POST /commit?step=N[&path=P...][&wait=0][&timeout=D].
func (h controlHandler) commit(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	c, ok := h.c.(Committer)
	if !ok {
		http.Error(w, "this agent does not take commits", http.StatusNotImplemented)
		return
	}
	q := r.URL.Query()
	n, err := strconv.ParseInt(q.Get("step"), 10, 64)
	if err != nil || n < 0 {
		http.Error(w, fmt.Sprintf("step %q: want a step number >= 0", q.Get("step")), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			http.Error(w, fmt.Sprintf("timeout %q: want a duration such as 10m", v), http.StatusBadRequest)
			return
		}
		if d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
	}
	wait := q.Get("wait") != "0"
	err = c.Commit(ctx, n, q["path"], wait)
	resp := commitResponse{Durable: err == nil && wait}
	if err != nil {
		resp.Error = err.Error()
	}
	h.log.Info("commit answered", zap.Int64("step", n), zap.Bool("durable", resp.Durable), zap.String("error", resp.Error))
	writeControlJSON(w, http.StatusOK, resp)
}
