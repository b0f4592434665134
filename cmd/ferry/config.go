package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/agent/detect"
)

// applyConfigFile sets, from a file of FERRY_NAME=value lines (the format
// of a systemd EnvironmentFile: # comments, optional quotes), every flag of
// the command that neither the command line nor the environment set. A
// flag's name in the file is its environment variable.
func applyConfigFile(c *cli.Context, path string) error {
	if path == "" {
		return nil
	}
	values, err := readEnvFile(path)
	if err != nil {
		return err
	}
	byEnv := map[string]cli.Flag{}
	for _, f := range c.Command.Flags {
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, name := range ev.GetEnvVars() {
				byEnv[name] = f
			}
		}
	}
	for key, val := range values {
		f, ok := byEnv[key]
		if !ok {
			if strings.HasPrefix(key, "FERRY_") {
				return usagef("--config %s: unknown setting %s", path, key)
			}
			continue // e.g. AWS_* settings meant for the environment
		}
		flag := f.Names()[0]
		if c.IsSet(flag) {
			continue
		}
		if err := c.Set(flag, val); err != nil {
			return usagef("--config %s: %s=%q: %s", path, key, val, wantedValue(f))
		}
	}
	return nil
}

// readEnvFile parses NAME=value lines.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(strings.TrimPrefix(key, "export "))
		if !ok || key == "" {
			return nil, usagef("--config %s line %d: expected NAME=value", path, n)
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && (val[0] == '"' && val[len(val)-1] == '"' || val[0] == '\'' && val[len(val)-1] == '\'') {
			val = val[1 : len(val)-1]
		}
		out[key] = val
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read --config %s: %w", path, err)
	}
	return out, nil
}

func joinNames(names []string) string { return strings.Join(names, ", ") }

func isKnownLayout(name string) bool {
	for _, n := range detect.LayoutNames() {
		if n == name {
			return true
		}
	}
	return false
}
