package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/store"
)

// Issue 47 item 5: the state dir is trusted only as ssh's StrictModes
// trusts ~/.ssh. Each attack below succeeded before PrepareStateDir (the
// agent chmodded and wrote through the link, read /etc/shadow's stand-in
// and quoted it); the legitimate setups beside them still start.

func newTrustAgent(t *testing.T, stateDir, watch string) (*Agent, error) {
	t.Helper()
	return New(Options{Store: store.NewMemStore(), URL: "s3://b/p", Prefix: "p", StateDir: stateDir, Detect: detect.Options{Dir: watch}})
}

// A link at <base>/agents/<key> (the key is predictable) to a victim's
// folder: the agent must neither chmod it nor write into it.
func TestStateDirLinkToVictimRefused(t *testing.T) {
	root, watch := t.TempDir(), t.TempDir()
	base, victim := filepath.Join(root, "state"), filepath.Join(root, "victim")
	for _, d := range []string{filepath.Join(base, agentsDirName), victim} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	stateDir := AgentStateDir(base, Identity{Destination: "s3://b/p", Watch: watch})
	if err := os.Symlink(victim, stateDir); err != nil {
		t.Fatal(err)
	}
	_, err := newTrustAgent(t, stateDir, watch)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("agent over a linked state folder: %v, want a refusal naming the link", err)
	}
	fi, _ := os.Stat(victim)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("the victim's folder was chmodded to %04o", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("the agent wrote %d files into the victim's folder (%s)", len(ents), ents[0].Name())
	}
}

// A base state dir another user owns and anyone can write (a careless
// --state-dir /tmp/shared): refused before anything is created in it.
func TestStateDirOfAnotherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a folder to another user")
	}
	root, watch := t.TempDir(), t.TempDir()
	for _, c := range []struct {
		name string
		uid  int
		mode os.FileMode
		want string
	}{
		{"nobody's", 65534, 0o755, "owned by uid 65534"},
		{"world-writable", 0, 0o777, "writable by group or others (mode 0777)"},
		{"group-writable", 0, 0o770, "writable by group or others (mode 0770)"},
		// A root-owned sticky base (--state-dir /tmp) is a parent like
		// any sticky /tmp: trusted, but every folder below must be the
		// agent's own, so one another user made first is refused.
		{"sticky base", 0, os.ModeSticky | 0o777, "agents: not safe for private state: owned by uid 65534"},
	} {
		base := filepath.Join(root, strings.ReplaceAll(c.name, " ", "-"))
		if err := os.Mkdir(base, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(base, c.uid, c.uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(base, c.mode); err != nil {
			t.Fatal(err)
		}
		if c.mode&os.ModeSticky != 0 {
			squat := filepath.Join(base, agentsDirName)
			if err := os.Mkdir(squat, 0o777); err != nil || os.Chown(squat, 65534, 65534) != nil {
				t.Fatal(err)
			}
		}
		stateDir := AgentStateDir(base, Identity{Destination: "s3://b/p", Watch: watch})
		if _, err := newTrustAgent(t, stateDir, watch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s base: %v, want %q", c.name, err, c.want)
		}
		if _, err := os.Lstat(stateDir); err == nil {
			t.Errorf("%s base: the agent created its folders in it before refusing", c.name)
		}
	}
}

// journal.json linked to a secret: not read, and no error quotes it. A
// damaged journal is refused without quoting its bytes either.
func TestStateFilesNotFollowedNorQuoted(t *testing.T) {
	root, watch := t.TempDir(), t.TempDir()
	secret := filepath.Join(root, "shadow")
	if err := os.WriteFile(secret, []byte("root:$6$secret:19000::::::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"journal.json", identityFileName} {
		for _, link := range []bool{true, false} {
			stateDir := filepath.Join(root, "state-"+name, "agents", "k")
			if link {
				stateDir += "-link"
			}
			if err := PrepareStateDir(stateDir); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(stateDir, name)
			var err error
			if link {
				err = os.Symlink(secret, p)
			} else {
				err = os.WriteFile(p, []byte("root:$6$secret"), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = newTrustAgent(t, stateDir, watch)
			if err == nil || strings.Contains(err.Error(), "'r'") || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s (link %v): %v, want a refusal that quotes nothing", name, link, err)
			}
		}
	}
}

// The legitimate setups: a fresh state dir several levels down a folder of
// the agent's own (as under $HOME or /var/lib), created 0700; a folder of
// the user's own inside a root-owned sticky folder (as /tmp); a restart.
func TestStateDirLegitimateSetups(t *testing.T) {
	root, watch := t.TempDir(), t.TempDir()
	tmp := filepath.Join(root, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	sticky := os.Geteuid() == 0 // a sticky parent is trusted only when root owns it
	for _, base := range []string{filepath.Join(root, "home", ".local", "state", "ferry"), filepath.Join(tmp, "mine")} {
		if base == filepath.Join(tmp, "mine") && !sticky {
			continue
		}
		stateDir := AgentStateDir(base, Identity{Destination: "s3://b/p", Watch: watch})
		for range 2 {
			_, err := newTrustAgent(t, stateDir, watch)
			if err != nil {
				t.Fatalf("agent with state dir %s: %v", base, err)
			}
		}
		fi, err := os.Stat(stateDir)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("state folder %s: %v, mode %v, want 0700", stateDir, err, fi.Mode().Perm())
		}
	}
}
