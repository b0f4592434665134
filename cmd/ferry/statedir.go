package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/manifest"
)

// The state dir given with --state-dir (or the default) is a base: each
// agent keeps its state in a folder of its own under it, keyed by its
// destination and watched directory (agent.AgentStateDir). `ferry status`
// and `ferry flush` find the agent of a job from the same settings.

// stateBase returns the base state dir: the flag's value, else the default.
func stateBase(flag string) string {
	if flag != "" {
		return flag
	}
	return defaultStateDir()
}

// agentIdentity is what an agent with these --watch and --to values
// uploads; loc must come from parseLocation.
func agentIdentity(watch string, loc manifest.Location) agent.Identity {
	return agent.Identity{Destination: loc.String(), Watch: agent.CanonicalDir(watch)}
}

// agentSelector is how `ferry status` and `ferry flush` say which agent
// they mean: the base state dir, and optionally the job's --watch and --to
// (FERRY_WATCH, FERRY_TO), as the agent itself was given them.
type agentSelector struct {
	base, watch, to string
}

// selectorFlags are the flags of agentSelector.
func selectorFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "state-dir", EnvVars: []string{"FERRY_STATE_DIR"},
			Usage: "the state dir the agent was started with (default $XDG_STATE_HOME/ferry or ~/.local/state/ferry)"},
		&cli.StringFlag{Name: "watch", EnvVars: []string{"FERRY_WATCH"}, Usage: "the agent's watched `DIR`, to pick it when several agents share the state dir (default: any)"},
		&cli.StringFlag{Name: "to", EnvVars: []string{"FERRY_TO"}, Usage: "the agent's destination `s3://bucket/prefix` or file:///folder, to pick it when several agents share the state dir (default: any)"},
		// As every command takes it (commonFlags): these print no log,
		// and -q drops their progress lines.
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, EnvVars: []string{"FERRY_QUIET"}, Usage: "no progress lines; the result and errors only"},
	}
}

func readSelector(c *cli.Context) agentSelector {
	return agentSelector{base: stateBase(c.String("state-dir")), watch: c.String("watch"), to: c.String("to")}
}

// locate returns the state folder of the agent the selector names. With
// both --watch and --to it is exactly that agent's folder (running or
// not: the control client then says no agent runs there). Otherwise it is
// the one running agent under the base that matches what was given; when
// several match it refuses, naming them, rather than answer for another
// job's agent.
func (s agentSelector) locate() (string, error) {
	var want agent.Identity
	if s.to != "" {
		loc, err := parseLocation("to", s.to)
		if err != nil {
			return "", err
		}
		want.Destination = loc.String()
	}
	if s.watch != "" {
		want.Watch = agent.CanonicalDir(s.watch)
	}
	if want.Destination != "" && want.Watch != "" {
		return agent.AgentStateDir(s.base, want), nil
	}
	found, err := agent.FindAgents(s.base)
	if err != nil {
		return "", err
	}
	var running []agent.AgentDir
	for _, a := range found {
		if a.Running && (want.Watch == "" || a.Watch == want.Watch) && (want.Destination == "" || a.Destination == want.Destination) {
			running = append(running, a)
		}
	}
	switch len(running) {
	case 1:
		return running[0].Dir, nil
	case 0:
		return "", fmt.Errorf("%w%s with state dir %s", control.ErrNoAgent, s.describe(want), s.base)
	}
	names := make([]string, len(running))
	for i, a := range running {
		names[i] = a.Watch + " -> " + a.Destination
	}
	return "", fmt.Errorf("%d ferry agents run with state dir %s (%s): name one with --watch (FERRY_WATCH) and --to (FERRY_TO)",
		len(running), s.base, strings.Join(names, ", "))
}

func (s agentSelector) describe(want agent.Identity) string {
	switch {
	case want.Watch != "":
		return " for --watch " + want.Watch
	case want.Destination != "":
		return " for --to " + want.Destination
	}
	return ""
}

// legacyJournal returns the journal a ferry before per-agent state folders
// kept directly in the base state dir, or "". It does not say which
// destination it belongs to, so it is never used: the steps it records are
// found committed in the bucket instead.
func legacyJournal(base string) string {
	p := filepath.Join(base, "journal.json")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// lookupGroup returns the number of the group named by --control-group: a
// name in the group database, or a number.
func lookupGroup(name string) (int, error) {
	if g, err := user.LookupGroup(name); err == nil {
		return strconv.Atoi(g.Gid)
	}
	if gid, err := strconv.Atoi(name); err == nil && gid >= 0 {
		return gid, nil
	}
	return -1, usagef("--control-group %q: no such group (give a group name this host knows, or its number)", name)
}
