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
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/atomicfile"
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
	raw, err := os.ReadFile(path)
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
		return fmt.Errorf("state dir %s: %s is damaged (%v); remove the folder to start over (committed steps are found in the bucket again)", dir, identityFileName, err)
	}
	if have.Identity != id {
		return fmt.Errorf("state dir %s belongs to the agent of %s -> %s, not %s -> %s; use another --state-dir",
			dir, have.Watch, have.Destination, id.Watch, id.Destination)
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
		raw, err := os.ReadFile(filepath.Join(dir, identityFileName))
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
