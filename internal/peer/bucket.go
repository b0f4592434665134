package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/ctxtime"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

var groupPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckGroup reports whether group can name a folder of announcements.
func CheckGroup(group string) error {
	if !groupPattern.MatchString(group) {
		return fmt.Errorf("peer group %q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (the job's ID)", group)
	}
	return nil
}

// announceKey is where a node of group announces addr.
func announceKey(prefix, group, addr string) string {
	return manifest.PeersPrefix(prefix) + group + "/" + addr
}

// Announce writes this node's address under the group's folder in the
// bucket, for Discover, and returns a function that removes it.
func Announce(ctx context.Context, st store.Store, prefix, group, addr string) (withdraw func(context.Context), err error) {
	if err := CheckGroup(group); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("announce %q: not host:port", addr)
	}
	key := announceKey(prefix, group, addr)
	body := []byte(addr)
	if _, err := st.Put(ctx, key, strings.NewReader(string(body)), int64(len(body)), store.PutOptions{CRC32C: store.CRC32C(body)}); err != nil {
		return nil, fmt.Errorf("announce this node at %s: %w", key, err)
	}
	return func(ctx context.Context) { _ = st.Delete(ctx, key) }, nil
}

// Discover lists the addresses announced under group until count are
// there or wait has passed, and returns them sorted: the same list on
// every node that sees them all. Fewer than count after the wait is not
// an error (a node that never started); none at all is.
func Discover(ctx context.Context, st store.Store, prefix, group string, count int, wait time.Duration) ([]string, error) {
	if err := CheckGroup(group); err != nil {
		return nil, err
	}
	folder := manifest.PeersPrefix(prefix) + group + "/"
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var addrs []string
	for {
		addrs = addrs[:0]
		err := st.List(ctx, folder, "", 0, func(o store.ObjectInfo) error {
			a := strings.TrimPrefix(o.Key, folder)
			if _, _, err := net.SplitHostPort(a); err == nil {
				addrs = append(addrs, a)
			}
			return nil
		})
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("list the peers announced under %s: %w", folder, err)
		}
		if len(addrs) >= count || ctxtime.Sleep(ctx, 200*time.Millisecond) != nil {
			break
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no peer announced under %s within %s", folder, wait)
	}
	slices.Sort(addrs)
	return addrs, nil
}
