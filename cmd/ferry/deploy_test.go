package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

const (
	unitFile    = "../../deploy/systemd/ferry-agent@.service"
	envExample  = "../../deploy/systemd/ferry-agent.env.example"
	stateDirVar = "FERRY_STATE_DIR"
)

// unitSettings reads KEY=value lines of a systemd unit (the last one wins).
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	return out
}

// The example env file, with its optional settings uncommented, is a
// valid --config for `ferry agent`: every FERRY_ name is a flag's variable
// and every value parses. It also agrees with the unit.
func TestDeployEnvExample(t *testing.T) {
	data, err := os.ReadFile(envExample)
	if err != nil {
		t.Fatal(err)
	}
	// Uncomment the optional FERRY_ settings so they are checked too.
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "#FERRY_") {
			l = strings.TrimPrefix(l, "#")
		}
		lines = append(lines, l)
	}
	path := filepath.Join(t.TempDir(), "agent.env")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	values, err := readEnvFile(path)
	if err != nil {
		t.Fatal(err)
	}

	var got map[string]string
	cmd := newAgentCommand()
	cmd.Action = func(c *cli.Context) error {
		got = map[string]string{}
		for _, f := range c.Command.Flags {
			if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
				for _, name := range ev.GetEnvVars() {
					got[name] = c.String(f.Names()[0])
				}
			}
		}
		return nil
	}
	app := &cli.App{Name: "ferry", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{cmd}}
	if err := app.RunContext(context.Background(), []string{"ferry", "agent", "--config", path}); err != nil {
		t.Fatalf("ferry agent --config %s: %v", envExample, err)
	}
	for key := range values {
		if !strings.HasPrefix(key, "FERRY_") {
			continue
		}
		if _, ok := got[key]; !ok {
			t.Errorf("%s is set in the example but no agent flag reads it", key)
		}
	}

	unit := unitSettings(t, unitFile)
	if want := "/var/lib/" + unit["StateDirectory"]; values[stateDirVar] != want {
		t.Errorf("%s=%s in the example, but the unit's StateDirectory is %s", stateDirVar, values[stateDirVar], want)
	}
	stop, err := time.ParseDuration(strings.Replace(unit["TimeoutStopSec"], "min", "m", 1))
	if err != nil {
		t.Fatalf("TimeoutStopSec=%s: %v", unit["TimeoutStopSec"], err)
	}
	drain, err := time.ParseDuration(values["FERRY_DRAIN_TIMEOUT"])
	if err != nil || drain >= stop {
		t.Errorf("FERRY_DRAIN_TIMEOUT=%s must be below TimeoutStopSec=%s, or systemd kills the drain", values["FERRY_DRAIN_TIMEOUT"], unit["TimeoutStopSec"])
	}
	if addr := values["FERRY_METRICS_ADDR"]; !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("FERRY_METRICS_ADDR=%s in the example: keep metrics on loopback by default", addr)
	}
	for k, v := range unit {
		if strings.Contains(strings.ToUpper(k+v), "SECRET") || strings.Contains(v, "AWS_ACCESS_KEY_ID") {
			t.Errorf("the unit sets %s=%s: secrets belong in the credentials or env file", k, v)
		}
	}
}

// The example's commented FERRY_ lines say they show the defaults: each
// is an agent flag's variable, with that flag's real default (it once
// claimed a concurrency of 16 and a bandwidth cap for flags whose defaults
// were 256 and unlimited).
func TestDeployEnvExampleDefaults(t *testing.T) {
	data, err := os.ReadFile(envExample)
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]string{}
	for _, f := range newAgentCommand().Flags {
		df, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		for _, ev := range df.GetEnvVars() {
			defaults[ev] = strings.Trim(df.GetDefaultText(), `"`)
		}
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "#"), "=")
		if !strings.HasPrefix(line, "#FERRY_") || !ok {
			continue
		}
		n++
		def, known := defaults[name]
		switch {
		case !known:
			t.Errorf("%s: no agent flag reads %s", envExample, name)
		case value != def:
			t.Errorf("%s shows %s=%s as the default; ferry agent's default is %q", envExample, name, value, def)
		}
	}
	if n < 10 {
		t.Errorf("only %d default lines in %s", n, envExample)
	}
}

// The unit gives the agent CAP_LEASE (close-write detection takes a lease
// on files it may not own) and runs it as a dedicated user, not root.
func TestDeployUnitLeaseAndUser(t *testing.T) {
	unit := unitSettings(t, unitFile)
	if u := unit["User"]; u == "" || u == "root" {
		t.Errorf("User=%q: run the agent as a dedicated user", u)
	}
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		if !strings.Contains(unit[k], "CAP_LEASE") {
			t.Errorf("%s=%s lacks CAP_LEASE: without it every step waits out the settle window", k, unit[k])
		}
	}
	if !strings.Contains(unit["RestartPreventExitStatus"], "2") {
		t.Errorf("RestartPreventExitStatus=%q: a bad setting (exit 2) must not restart every 5 s", unit["RestartPreventExitStatus"])
	}
}

// The unit runs ferry doctor before the agent, with the agent's settings,
// never fatal ('-') and bounded well inside the start timeout.
func TestDeployUnitRunsDoctor(t *testing.T) {
	unit := unitSettings(t, unitFile)
	pre := strings.Fields(unit["ExecStartPre"])
	agent := strings.Fields(unit["ExecStart"])
	if len(pre) != 5 || pre[0] != "-/usr/bin/timeout" || len(agent) == 0 || pre[2] != agent[0] || pre[3] != "doctor" || pre[4] != "--quiet" {
		t.Fatalf("ExecStartPre=%q: want -/usr/bin/timeout LIMIT FERRY doctor --quiet, the agent's binary", unit["ExecStartPre"])
	}
	limit, err := time.ParseDuration(pre[1])
	if err != nil {
		t.Fatalf("ExecStartPre's timeout %q: %v", pre[1], err)
	}
	start, err := time.ParseDuration(strings.ReplaceAll(unit["TimeoutStartSec"], "min", "m"))
	if err != nil || start < limit+time.Minute {
		t.Errorf("TimeoutStartSec=%s must leave the agent a minute after doctor's %v (%v)", unit["TimeoutStartSec"], limit, err)
	}
	if !strings.HasSuffix(unit["ExecStart"], "ferry agent") {
		t.Errorf("ExecStart=%q", unit["ExecStart"])
	}
}
