package control

// The client side of the control socket: what `ferry status`, `ferry
// flush` and `ferry commit` call.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Client talks to the agent that owns a state dir, for `ferry
// status` and `ferry flush`.
type Client struct {
	stateDir string
	path     string
	http     *http.Client
}

// Dial returns a client for the agent using stateDir. It connects
// lazily, on each call, so it never fails itself.
func Dial(stateDir string) *Client {
	path := SocketPath(stateDir)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}
	return &Client{stateDir: stateDir, path: path, http: &http.Client{Transport: tr}}
}

// Status returns the agent's status.
func (cl *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := cl.do(ctx, http.MethodGet, "/status", &st)
	return st, err
}

// WaitingError is a Controller's Flush ending with its context: For says
// what it still waited for (steps and their states), for the answer.
type WaitingError struct {
	Err error
	For string
}

func (e *WaitingError) Error() string {
	if e.For == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + "; still waiting for " + e.For
}

// Unwrap returns the context's error.
func (e *WaitingError) Unwrap() error { return e.Err }

// ErrStarting is a Controller's Flush error while the agent has not yet
// looked at its directory: it cannot know what to wait for.
var ErrStarting = errors.New("the agent is still starting (listing the committed steps in the bucket, or waiting for it to answer)")

// NotCommittedError is Flush's error when the agent answered but some
// steps are not durable yet; it names them so scripts can say which.
type NotCommittedError struct {
	Steps []int64
	// Reason is the agent's explanation, e.g. the timeout.
	Reason string
}

func (e *NotCommittedError) Error() string {
	var msg string
	switch len(e.Steps) {
	case 0:
		msg = "not every step is committed"
	case 1:
		msg = "step " + strconv.FormatInt(e.Steps[0], 10) + " is not committed"
	default:
		s := make([]string, len(e.Steps))
		for i, n := range e.Steps {
			s[i] = strconv.FormatInt(n, 10)
		}
		msg = fmt.Sprintf("%d steps are not committed: %s", len(e.Steps), strings.Join(s, ", "))
	}
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg
}

// Flush asks the agent to wait until every step it has seen is committed,
// for at most timeout (0: no limit). It returns nil, nil when everything is
// committed, and the steps still not committed with a *NotCommittedError
// when the agent answered otherwise. Cancelling ctx abandons the wait on
// both sides.
func (cl *Client) Flush(ctx context.Context, timeout time.Duration) (notCommitted []int64, err error) {
	url := "/flush"
	if timeout > 0 {
		url += "?timeout=" + timeout.String()
		// Leave the agent time to answer after its own timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+time.Minute)
		defer cancel()
	}
	var resp flushResponse
	if err := cl.do(ctx, http.MethodPost, url, &resp); err != nil {
		return nil, err
	}
	if resp.Committed {
		return nil, nil
	}
	return resp.NotCommitted, &NotCommittedError{Steps: resp.NotCommitted, Reason: resp.Error}
}

// NotOwnerFix is what to do when the agent's state folder or control
// socket is not open to this user: they are the agent's user's alone,
// unless the agent opened them to a group (--control-group).
const NotOwnerFix = "the agent's control socket is not open to this user: run this command as the agent's user, " +
	"or start the agent with --control-group (FERRY_CONTROL_GROUP) naming a group of this user"

// do sends one request and decodes the JSON answer into v.
func (cl *Client) do(ctx context.Context, method, url string, v any) error {
	op := strings.TrimPrefix(strings.SplitN(url, "?", 2)[0], "/")
	req, err := http.NewRequestWithContext(ctx, method, "http://ferry-agent"+url, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("%s: %w", op, ctxErr)
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w with state dir %s (socket %s)", ErrNoAgent, cl.stateDir, cl.path)
		}
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("%s: ferry agent at %s: %w: %s", op, cl.path, err, NotOwnerFix)
		}
		return fmt.Errorf("%s: ferry agent at %s: %w", op, cl.path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %w: %s", op, ErrRefused, strings.TrimSpace(string(msg)))
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: ferry agent at %s answered %s: %s", op, cl.path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: read the answer of the ferry agent at %s: %w", op, cl.path, err)
	}
	return nil
}

// Commit asks the agent to take step n as complete, made of paths (none:
// the layout's step n), and with wait to return once it is durable, for at
// most timeout (0: no limit). It returns the agent's error as it says it.
func (cl *Client) Commit(ctx context.Context, n int64, paths []string, wait bool, timeout time.Duration) error {
	q := url.Values{"step": {strconv.FormatInt(n, 10)}, "path": paths}
	if !wait {
		q.Set("wait", "0")
	}
	if timeout > 0 {
		q.Set("timeout", timeout.String())
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+time.Minute)
		defer cancel()
	}
	var resp commitResponse
	if err := cl.do(ctx, http.MethodPost, "/commit?"+q.Encode(), &resp); err != nil {
		return err
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}
