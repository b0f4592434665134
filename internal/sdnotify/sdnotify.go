// Package sdnotify tells systemd about the agent's life cycle (the
// sd_notify protocol) so that a Type=notify unit starts dependents only
// once the agent is ready and restarts it when it hangs. It is a few lines
// over a unixgram socket rather than a dependency.
//
// Every function reads the environment systemd sets and does nothing when
// it is unset, so the agent calls them unconditionally.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Ready tells systemd that start-up is complete.
func Ready() error { return send("READY=1") }

// Stopping tells systemd that the agent is shutting down (draining), so
// the stop is not mistaken for a hang.
func Stopping() error { return send("STOPPING=1") }

// Status sets the one-line status shown by `systemctl status`.
func Status(msg string) error {
	// A newline would start another assignment.
	return send("STATUS=" + strings.Join(strings.Fields(msg), " "))
}

// Watchdog tells systemd the agent is alive; call it every
// WatchdogInterval()/2 when that is non-zero.
func Watchdog() error { return send("WATCHDOG=1") }

// WatchdogInterval is the watchdog timeout systemd expects pings within,
// or 0 when no watchdog is enabled for this process.
func WatchdogInterval() time.Duration {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	// WATCHDOG_PID names the process the watchdog is for; a child that
	// inherited the environment must not ping on the parent's behalf.
	if p := os.Getenv("WATCHDOG_PID"); p != "" {
		pid, err := strconv.Atoi(p)
		if err != nil || pid != os.Getpid() {
			return 0
		}
	}
	return time.Duration(usec) * time.Microsecond
}

// send writes one datagram to $NOTIFY_SOCKET: a path, or an abstract
// socket name starting with '@' (which Go's net package maps to the
// abstract namespace).
func send(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] != '/' && name[0] != '@' {
		return fmt.Errorf("sd_notify: unsupported NOTIFY_SOCKET %q", name)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", state, err)
	}
	return nil
}
