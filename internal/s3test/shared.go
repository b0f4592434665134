package s3test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3proxy"
)

// The shared server lives as long as the test binary; it is the one piece
// of package state, as a test binary has no other place to keep it.
var shared struct {
	once sync.Once
	srv  *Server
	// view is what Shared returns: srv, or srv behind proxy (EnvR2Rules).
	view  *Server
	proxy *s3proxy.Proxy
	dir   string
	err   error
}

const sharedDirPrefix = "ferry-s3test-"

// Shared returns the test binary's shared server, starting it on first use.
// Tests keep apart by using buckets of their own (NewBucket) and must not
// Stop or Restart it. It is killed when the test binary exits (on Linux,
// even if the binary crashes); call Main from TestMain to also remove its
// directory at once, otherwise the next run removes it.
func Shared(t testing.TB) *Server {
	t.Helper()
	kind, bin := binary(t)
	shared.once.Do(func() {
		sweepSharedDirs()
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", sharedDirPrefix, os.Getpid()))
		if err != nil {
			shared.err = err
			return
		}
		shared.dir = dir
		s, err := newServer(kind, bin, dir, options{})
		if err == nil {
			err = s.startFresh()
		}
		if err != nil {
			shared.err = err
			return
		}
		s.shared = true
		shared.srv = s
		shared.view, shared.proxy, shared.err = frontShared(s)
	})
	if shared.err != nil {
		t.Fatalf("s3test: shared server: %v", shared.err)
	}
	return shared.view
}

// Main runs the tests, then stops the shared server and removes its
// directory. Call it from TestMain: func TestMain(m *testing.M) { s3test.Main(m) }.
func Main(m *testing.M) {
	code := closeSharedProxy(shared.proxy, m.Run())
	if s := shared.srv; s != nil {
		s.stop(false)
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// sweepSharedDirs removes the directories of shared servers whose test
// binary has exited without Main.
func sweepSharedDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedDirPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), sharedDirPrefix)
		pidStr, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
