package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// listen opens a unixgram socket like systemd's and points NOTIFY_SOCKET
// at it.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return conn
}

func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	conn := listen(t, filepath.Join(t.TempDir(), "notify"))
	for _, tc := range []struct {
		call func() error
		want string
	}{
		{Ready, "READY=1"},
		{Watchdog, "WATCHDOG=1"},
		{func() error { return Status("uploading step 1200\n3 pending") }, "STATUS=uploading step 1200 3 pending"},
		{Stopping, "STOPPING=1"},
	} {
		if err := tc.call(); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, conn); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract unix sockets are Linux-only")
	}
	conn := listen(t, fmt.Sprintf("@ferry-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := Ready(); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
}

func TestNotifyUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	for _, f := range []func() error{Ready, Stopping, Watchdog, func() error { return Status("x") }} {
		if err := f(); err != nil {
			t.Fatalf("without NOTIFY_SOCKET: %v, want nil", err)
		}
	}
}

func TestNotifyNobodyListening(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
	if err := Ready(); err == nil {
		t.Fatal("Ready to a missing socket succeeded")
	}
}

func TestWatchdogInterval(t *testing.T) {
	me, other := strconv.Itoa(os.Getpid()), strconv.Itoa(os.Getpid()+1)
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"", "", 0},
		{"60000000", "", time.Minute},
		{"60000000", me, time.Minute},
		{"60000000", other, 0}, // meant for another process
		{"junk", "", 0},
		{"0", "", 0},
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		if got := WatchdogInterval(); got != tc.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, want %v", tc.usec, tc.pid, got, tc.want)
		}
	}
}
