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
