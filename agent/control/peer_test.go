package control

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// serveWith serves c on a new state dir's socket, answering whom auth
// allows.
func serveWith(t *testing.T, c Controller, auth Authorizer) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Listen(SocketPath(dir), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	s.SetAuthorizer(auth)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, c) }()
	t.Cleanup(func() { cancel(); <-done })
	return dir
}

// The server reads the caller's credentials from the kernel: this test
// process's own uid, gid, pid and groups.
func TestPeerCredentialsAreTheCallers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SO_PEERCRED is read on Linux only")
	}
	var seen []Peer
	dir := serveWith(t, &fakeController{status: testStatus()}, func(p Peer) error {
		seen = append(seen, p)
		return nil
	})
	if _, err := Dial(dir).Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 {
		t.Fatalf("authorizer asked %d times, want 1", len(seen))
	}
	p := seen[0]
	if !p.Known || int(p.UID) != os.Geteuid() || int(p.GID) != os.Getegid() || int(p.PID) != os.Getpid() {
		t.Errorf("peer %+v, want uid %d gid %d pid %d", p, os.Geteuid(), os.Getegid(), os.Getpid())
	}
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if p.Groups != nil && !slices.Contains(p.Groups, uint32(g)) {
			t.Errorf("peer groups %v lack this process's group %d", p.Groups, g)
		}
	}
}

// A caller the authorizer refuses gets one line and none of the status:
// not the watch dir, not a step; and no flush or commit is run.
func TestControlRefusesCaller(t *testing.T) {
	c := &committer{fakeController: fakeController{status: testStatus()}, got: make(chan string, 1)}
	dir := serveWith(t, c, func(p Peer) error {
		return errors.New("user 1234 may not use this agent")
	})
	cl := Dial(dir)
	_, err := cl.Status(context.Background())
	if !errors.Is(err, ErrRefused) || strings.Contains(err.Error(), testStatus().Watch) || strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("status: %v", err)
	}
	if _, err := cl.Flush(context.Background(), 0); !errors.Is(err, ErrRefused) {
		t.Errorf("flush: %v", err)
	}
	if err := cl.Commit(context.Background(), 7, []string{"a"}, false, 0); !errors.Is(err, ErrRefused) {
		t.Errorf("commit: %v", err)
	}
	select {
	case got := <-c.got:
		t.Errorf("a refused caller's commit reached the agent: %s", got)
	default:
	}
}

// Without an authorizer only root and the agent's user are answered: the
// test runs as the agent's user.
func TestControlDefaultAnswersOwner(t *testing.T) {
	dir, _ := startControl(t, &fakeController{status: testStatus()})
	if _, err := Dial(dir).Status(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Who may read the watch dir, as the kernel decides it: the owner; a
// member of its group (primary or supplementary) by the group bits alone;
// anyone else by the other bits; root and the agent's user always.
func TestWatchReaders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("owners are read on Linux only")
	}
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 1000, 2000); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	owner, group, _ := fileOwner(fi.Sys())
	other := uint32(4242)
	if int(other) == os.Geteuid() || other == owner {
		t.Skip("uid 4242 is in use here")
	}
	auth := WatchReaders(dir)
	cases := []struct {
		mode os.FileMode
		peer Peer
		ok   bool
	}{
		{0o700, Peer{Known: true, UID: 0, GID: 0}, true},
		{0o700, Peer{Known: true, UID: uint32(os.Geteuid())}, true},
		{0o700, Peer{Known: true, UID: owner, GID: 1}, true},
		{0o700, Peer{Known: true, UID: other, GID: group}, false},
		{0o750, Peer{Known: true, UID: other, GID: group}, true},
		{0o750, Peer{Known: true, UID: other, GID: 1, Groups: []uint32{7, group}}, true},
		{0o750, Peer{Known: true, UID: other, GID: 1, Groups: []uint32{7}}, false},
		{0o740, Peer{Known: true, UID: other, GID: group}, false}, // no search bit
		{0o705, Peer{Known: true, UID: other, GID: group}, false}, // the group class decides
		{0o705, Peer{Known: true, UID: other, GID: 1}, true},
	}
	for _, c := range cases {
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := auth(c.peer); (err == nil) != c.ok {
			t.Errorf("mode %04o, peer %+v: %v, want allowed %v", c.mode, c.peer, err, c.ok)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := auth(Peer{Known: true, UID: other, GID: 1}); err == nil || strings.Contains(err.Error(), dir) {
		t.Errorf("refusal names the watch dir or allows: %v", err)
	}
}
