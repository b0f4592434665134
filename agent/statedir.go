package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/atomicfile"
	"github.com/ferrylabs/ferry/internal/safepath"
)

// State dir layout. Several agents share a node (one per job, or one per
// destination) and often one base state dir: the default one, or systemd's
// fixed /var/lib/ferry after FERRY_TO changed. Each agent therefore keeps
// its journal, upload state and control socket in a folder of its own,
// named after what it uploads:
//
//	<base>/agents/<key>/identity.json  destination and watched directory
//	<base>/agents/<key>/journal.json   steps committed to that destination
//	<base>/agents/<key>/uploads/       multipart uploads in flight
//	<base>/agents/<key>/agent.sock     control socket (status, flush)
//
// The key hashes the identity, so the journal of one destination can never
// mark another's steps as done, and `ferry status` run with a job's own
// settings finds that job's agent.
const (
	agentsDirName    = "agents"
	identityFileName = "identity.json"
)

// Identity names what an agent uploads: its destination (s3://bucket/prefix
// as manifest.Location.String writes it) and its watched directory
// (absolute, symlinks resolved: see CanonicalDir).
type Identity struct {
	Destination string `json:"destination"`
	Watch       string `json:"watch"`
}

// CanonicalDir returns dir as an absolute path with symlinks resolved, so
// that the same directory named two ways yields the same Identity. A path
// that cannot be resolved (it does not exist yet) is only made absolute.
func CanonicalDir(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return filepath.Clean(dir)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// key is the folder name of the identity's state: 16 hex digits of its
// SHA-256, short enough to keep the control socket's path well under the
// ~100 bytes unix sockets allow.
func (id Identity) key() string {
	sum := sha256.Sum256([]byte(id.Destination + "\x00" + id.Watch))
	return hex.EncodeToString(sum[:8])
}

// AgentStateDir returns the folder under base that holds the state of the
// agent uploading id.Watch to id.Destination.
func AgentStateDir(base string, id Identity) string {
	return filepath.Join(base, agentsDirName, id.key())
}

// identityFile is what identity.json holds.
type identityFile struct {
	Identity
	Created time.Time `json:"created"`
}

// ClaimStateDir records id in dir, or checks that dir already belongs to
// id: a state folder copied, moved or reused by hand for another
// destination must never lend it its journal.
func ClaimStateDir(dir string, id Identity) error {
	path := filepath.Join(dir, identityFileName)
	raw, err := safepath.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		raw, err := json.Marshal(identityFile{Identity: id, Created: time.Now().UTC()})
		if err != nil {
			return fmt.Errorf("encode state identity: %w", err)
		}
		if err := atomicfile.Write(path, raw, 0o600); err != nil {
			return fmt.Errorf("record state identity: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read state identity: %w", err)
	}
	var have identityFile
	if err := json.Unmarshal(raw, &have); err != nil {
		return fmt.Errorf("state dir %s: %s is damaged (%s); remove the folder to start over (committed steps are found in the bucket again)", dir, identityFileName, safepath.DecodeError(err))
	}
	if have.Identity != id {
		return fmt.Errorf("state dir %s belongs to the agent of %s -> %s, not %s -> %s; use another --state-dir",
			dir, have.Watch, have.Destination, id.Watch, id.Destination)
	}
	return nil
}

// PrepareStateDir makes dir (an agent's folder under its base state dir)
// ready for its state, as ssh's StrictModes would trust it: before
// anything is created or chmodded, every folder from / down to dir must
// belong to the agent's user or root and be writable by no one else (a
// root-owned sticky parent such as /tmp excepted), and no component may be
// a symbolic link. Missing folders are created 0700; dir itself is made
// 0700 through its open descriptor, so a link or a swapped folder never
// receives the chmod.
func PrepareStateDir(dir string) error {
	f, err := safepath.MkdirAll(dir, os.Geteuid())
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("state dir %s belongs to user %d, not to the agent's (%d): give --state-dir a folder of the agent's own", dir, st.Uid, os.Geteuid())
	}
	if err := f.Chmod(0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// AgentDir is an agent's state folder found under a base state dir.
type AgentDir struct {
	Dir string
	Identity
	// Running is true when an agent answers on the folder's control socket.
	Running bool
}

// FindAgents lists the agent state folders under base, sorted by watched
// directory and destination, and tells which have a running agent. A base
// with no agents folder yields none.
func FindAgents(base string) ([]AgentDir, error) {
	root := filepath.Join(base, agentsDirName)
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("list agents in %s: %w: %s", root, err, control.NotOwnerFix)
	}
	if err != nil {
		return nil, fmt.Errorf("list agents in %s: %w", root, err)
	}
	var out []AgentDir
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		raw, err := safepath.ReadFile(filepath.Join(dir, identityFileName))
		if err != nil {
			continue // not an agent's folder, or one still being created
		}
		var id identityFile
		if json.Unmarshal(raw, &id) != nil {
			continue
		}
		out = append(out, AgentDir{Dir: dir, Identity: id.Identity, Running: answers(control.SocketPath(dir))})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Watch != out[j].Watch {
			return out[i].Watch < out[j].Watch
		}
		return out[i].Destination < out[j].Destination
	})
	return out, nil
}

// answers reports whether something accepts connections on the unix
// socket at path. A socket left by a killed agent refuses at once.
func answers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// ShareControl opens the agent's control socket in stateDir, under the base
// state dir base, to the members of group gid (ferry agent
// --control-group): the trainer's user can then call ferry commit, flush
// and status beside an agent that runs as another user. Only what those
// commands need is opened: the agents' folders can be listed (0750), the
// agent's identity read (0640: a watch dir and a destination, no secret)
// and its socket used (0660); the journal and the upload state stay the
// agent's alone. base itself is not changed: it must already let the
// group pass (0711, or 0710 with the group), and the agents' folder must be
// the agent's user's own. Whoever can use the socket can declare a step
// complete: give it the group that writes the checkpoints, which can
// already make any step what it likes.
func ShareControl(base, stateDir string, gid int) error {
	if err := CheckControlGroup(base, gid); err != nil {
		return err
	}
	agents := filepath.Join(base, agentsDirName)
	if err := ownedByMe(agents); err != nil {
		return err
	}
	for _, p := range []struct {
		path string
		mode fs.FileMode
	}{
		{agents, 0o750},
		{stateDir, 0o750},
		{filepath.Join(stateDir, identityFileName), 0o640},
		{control.SocketPath(stateDir), 0o660},
	} {
		if err := os.Lchown(p.path, -1, gid); err != nil {
			return fmt.Errorf("open the control socket to group %d: %w (the agent's user must be a member of it)", gid, err)
		}
		if err := os.Chmod(p.path, p.mode); err != nil {
			return fmt.Errorf("open the control socket to group %d: %w", gid, err)
		}
	}
	return nil
}

// CheckControlGroup checks, before the agent starts (ferry doctor) and as it
// starts, that it can open its control socket to group gid under the base
// state dir base: the group can pass through base, and this process can
// give its files to the group (root, or a member of it).
func CheckControlGroup(base string, gid int) error {
	if err := groupCanPass(base, gid); err != nil {
		return err
	}
	if os.Geteuid() == 0 || os.Getegid() == gid {
		return nil
	}
	groups, err := os.Getgroups()
	if err != nil {
		return fmt.Errorf("control group: %w", err)
	}
	for _, g := range groups {
		if g == gid {
			return nil
		}
	}
	return fmt.Errorf("the agent's user is not a member of group %d, so it cannot give its control socket to it: add it (usermod -aG GROUP USER)", gid)
}

// groupCanPass checks that members of gid can pass through the folder dir.
func groupCanPass(dir string, gid int) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	perm := fi.Mode().Perm()
	if perm&0o001 != 0 {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Gid) == gid && perm&0o010 != 0 {
		return nil
	}
	return fmt.Errorf("state dir %s (mode %04o) does not let group %d reach the control socket: chmod 0711 it (in the systemd unit: StateDirectoryMode=0711)", dir, perm, gid)
}

// ownedByMe checks that the folder at p belongs to this process's user, so
// that opening it to a group changes nothing of anyone else's.
func ownedByMe(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("state dir %s belongs to user %d, not to the agent's (%d): give --state-dir a folder of the agent's own", p, st.Uid, os.Geteuid())
	}
	return nil
}
