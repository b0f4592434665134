// Package s3test runs a real S3 server (versitygw over a temporary
// directory, or SeaweedFS with EnvServer=seaweedfs) for tests: ferry's S3
// code is tested against a server, never against a mock of the SDK.
//
// Tests skip when the server's binary is absent (`make tools` builds
// versitygw, `make seaweedfs` weed), except under CI (env CI set), where
// they fail: CI must never skip silently. They also skip with -short
// (`make unit`).
package s3test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferrylabs/ferry/internal/tlsca"
)

// Credentials and region the servers run with.
const (
	AccessKey = "ferrytestaccess"
	SecretKey = "ferrytestsecret0123456789"
	Region    = "us-east-1"
)

// startTimeout bounds the wait for a new server to answer.
const startTimeout = 15 * time.Second

// Server is a running S3 server. Its fields are fixed for its lifetime,
// restarts included, except the credentials RotateCredentials changes.
type Server struct {
	// Endpoint is the base URL, http://127.0.0.1:PORT (https with WithTLS).
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	// Region is the region the server signs for.
	Region string
	// Dir holds the buckets, one sub-directory each.
	Dir string
	// CAFile is the PEM file of the CA that signed the server's certificate
	// (WithTLS only), for AWS_CA_BUNDLE.
	CAFile string

	bin, addr         string
	certFile, keyFile string
	shared            bool
	// kind is Versitygw or SeaweedFS; weed holds SeaweedFS's other ports.
	kind string
	weed weedPorts

	mu   sync.Mutex
	proc *process

	clientOnce sync.Once
	client     *s3.Client
}

type options struct {
	tls            bool
	access, secret string
}

// Option adjusts a server started by Start.
type Option func(*options)

// WithTLS serves HTTPS with a certificate for 127.0.0.1 signed by a fresh
// CA, written to Server.CAFile.
func WithTLS() Option { return func(o *options) { o.tls = true } }

// WithCredentials gives the server root credentials of its own instead of
// AccessKey and SecretKey: a second store that the first one's keys do not
// open.
func WithCredentials(access, secret string) Option {
	return func(o *options) { o.access, o.secret = access, secret }
}

// Start starts a private server for t and stops it when t ends. Use it for
// tests that stop or restart the server or need TLS; others should use
// Shared.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, fn := range opts {
		fn(&o)
	}
	kind, bin := binary(t)
	dir := t.TempDir()
	if kind == SeaweedFS && strings.ContainsRune(dir, ',') {
		// weed server reads -dir as a comma-separated list of folders,
		// and a subtest's name can hold a comma.
		var err error
		if dir, err = os.MkdirTemp("", "ferry-s3test-"); err != nil {
			t.Fatalf("s3test: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	s, err := newServer(kind, bin, dir, o)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	if err := s.startFresh(); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func newServer(kind, bin, dir string, o options) (*Server, error) {
	s := &Server{
		kind:      kind,
		AccessKey: cmp.Or(o.access, AccessKey),
		SecretKey: cmp.Or(o.secret, SecretKey),
		Region:    Region,
		Dir:       filepath.Join(dir, "data"),
		bin:       bin,
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	if o.tls {
		files, err := tlsca.Write(filepath.Join(dir, "tls"))
		if err != nil {
			return nil, fmt.Errorf("create TLS certificates: %w", err)
		}
		s.CAFile, s.certFile, s.keyFile = files.CA, files.Cert, files.Key
	}
	return s, nil
}

// startFresh picks a free port and starts the server on it, trying again
// when another process takes the port between the pick and the listen.
func (s *Server) startFresh() error {
	var err error
	for range 3 {
		var addr string
		if addr, err = freeAddr(); err != nil {
			return err
		}
		s.addr = addr
		scheme := "http"
		if s.CAFile != "" {
			scheme = "https"
		}
		s.Endpoint = scheme + "://" + addr
		if err = s.start(); err == nil {
			return nil
		}
	}
	return err
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// process is one run of the binary.
type process struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("server already running")
	}
	args, env, err := s.command()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, args...)
	// A clean environment: VGW_* and ROOT_* variables would reconfigure
	// versitygw, WEED_* SeaweedFS.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + os.TempDir()}, env...)
	// SeaweedFS reads master.toml and filer.toml from its working
	// directory first: its own.
	cmd.Dir = filepath.Dir(s.Dir)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := s.waitReady(p); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s on %s: %w; output:\n%s", s.kind, s.addr, err, out.String())
	}
	s.proc = p
	return nil
}

// command returns the server's arguments and the environment it needs.
func (s *Server) command() (args, env []string, err error) {
	if s.kind == SeaweedFS {
		args, err = s.weedArgs()
		return args, weedEnv, err
	}
	args = []string{
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region,
		"--port", s.addr,
		"--quiet",
		// Without it every response closes its connection.
		"--keep-alive",
	}
	if s.certFile != "" {
		args = append(args, "--cert", s.certFile, "--key", s.keyFile)
	}
	return append(args, "posix", s.Dir), nil, nil
}

// Kind returns which server this is: Versitygw or SeaweedFS.
func (s *Server) Kind() string { return s.kind }

// waitReady polls until the server answers any HTTP request (SeaweedFS:
// until a first write lands).
func (s *Server) waitReady(p *process) error {
	client := &http.Client{Timeout: time.Second}
	if s.CAFile != "" {
		tr, err := s.tlsTransport()
		if err != nil {
			return err
		}
		client.Transport = tr
	}
	if s.kind == SeaweedFS {
		client.Timeout = 5 * time.Second
		return s.weedReady(p, client)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering: %v", p.err)
		default:
		}
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after %v: %w", startTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 5 s) and waits for it to
// exit. Stopping a stopped server does nothing. It must not be called on
// the Shared server.
func (s *Server) Stop() {
	s.mustBePrivate("Stop")
	s.stop(false)
}

// Kill stops the server abruptly with SIGKILL, like a crash.
func (s *Server) Kill() {
	s.mustBePrivate("Kill")
	s.stop(true)
}

func (s *Server) stop(kill bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return
	}
	s.proc = nil
	if kill {
		_ = p.cmd.Process.Kill()
	} else {
		_ = p.cmd.Process.Signal(os.Interrupt)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Restart stops the server if it runs and starts it again on the same port
// and directory, keeping every bucket and object.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mustBePrivate("Restart")
	s.stop(false)
	var err error
	// The port was ours a moment ago; another process may still grab it.
	for i := 0; i < 20; i++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("s3test: restart: %v", err)
}

// RotateCredentials restarts the server with new root credentials on the
// same port and directory: the old key is refused from then on, as when
// a key is revoked. AccessKey and SecretKey change (not safe while another
// goroutine reads them).
func (s *Server) RotateCredentials(t testing.TB, access, secret string) {
	t.Helper()
	s.mustBePrivate("RotateCredentials")
	s.stop(false)
	s.AccessKey, s.SecretKey = access, secret
	s.Restart(t)
}

// Output returns what the running server has printed so far.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ""
	}
	return s.proc.out.String()
}

func (s *Server) mustBePrivate(op string) {
	if s.shared {
		panic("s3test: " + op + " on the shared server; use Start for a server of your own")
	}
}

// Env returns the environment a subprocess (the ferry binary) needs to reach
// the server: credentials, region, endpoint and, with TLS, the CA bundle.
func (s *Server) Env() []string {
	env := []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"S3_ENDPOINT_URL=" + s.Endpoint,
	}
	if s.CAFile != "" {
		env = append(env, "AWS_CA_BUNDLE="+s.CAFile)
	}
	return env
}

// binary returns the kind of server EnvServer asks for and its path. It
// skips t with -short, and when the binary is absent (failing t instead
// when env CI is set).
func binary(t testing.TB) (kind, path string) {
	t.Helper()
	if testing.Short() {
		t.Skip("s3test: needs a real S3 server; skipped with -short")
	}
	kind = ServerKind()
	env, name, build := "FERRY_VERSITYGW", "versitygw", "make tools"
	if kind == SeaweedFS {
		env, name, build = EnvSeaweedFS, "weed", "make seaweedfs"
	}
	path = os.Getenv(env)
	if path == "" {
		root, err := repoRoot()
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		path = filepath.Join(root, "tools", "bin", name)
	}
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("s3test: %s not found at %s (`%s` builds it; %s overrides the path)", name, path, build, env)
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set, so not skipping")
		}
		t.Skip(msg)
	}
	return kind, path
}

// repoRoot walks up from the working directory to the directory of go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// lockedBuffer collects a process's output; the process writes to it from
// the exec package's copying goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Keep the first 64 KiB: enough to see why a start failed.
	if room := 64<<10 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
