package savetrace

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// headerKeys are the keys of the header; true marks a required one.
var headerKeys = map[string]bool{
	"trace": true, "framework": true, "versions": true, "source": true,
	"layout": true, "flags": false, "ranks": true, "step": true, "keep": false,
	"torch-save": false, "deepspeed-world": false,
}

// requiredOrder is the order missing keys are named in.
var requiredOrder = []string{"trace", "framework", "versions", "source", "layout", "ranks", "step"}

// flagArity says which agent flags a trace may set and whether each
// takes a value; the replay maps each to detect.Options as cmd/ferry does.
var flagArity = map[string]bool{
	"step-pattern": true, "expected-ranks": true, "no-marker": false, "settle": true,
}

var layoutWord = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

var stepRE = regexp.MustCompile(`\{step(:0[1-9][0-9]?d?)?\}`)

// sourceRE wants at least one owner/repository@ref, the version read; a
// trace read from several (NeMo on Lightning on Megatron) names each.
var sourceRE = regexp.MustCompile(`(^|[;\s])[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[A-Za-z0-9_.+-]+`)

func (p *parser) headerLine(line string) error {
	key, value, _ := strings.Cut(line, ":")
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	if _, ok := headerKeys[key]; !ok {
		return p.errf("unknown header key %q (known: trace, framework, versions, source, layout, flags, ranks, step, keep, torch-save, deepspeed-world)", key)
	}
	if _, dup := p.header[key]; dup {
		return p.errf("header key %q given twice (first on line %d)", key, p.keyLine[key])
	}
	if value == "" {
		return p.errf("header key %q has no value", key)
	}
	if p.keyLine == nil {
		p.keyLine = map[string]int{}
	}
	p.header[key], p.keyLine[key] = value, p.line
	return p.headerValue(key, value)
}

func (p *parser) headerValue(key, value string) error {
	t := p.t
	var err error
	switch key {
	case "trace":
		if value != strconv.Itoa(Version) {
			return p.errf("trace: %q: this reader knows format version %d only", value, Version)
		}
	case "framework":
		t.Framework = value
	case "versions":
		t.Versions = value
	case "source":
		if !sourceRE.MatchString(value) {
			return p.errf("source: %q: want owner/repository@tag, the version read (several separated by ;)", value)
		}
		t.Source = value
	case "layout":
		if !layoutWord.MatchString(value) {
			return p.errf("layout: %q is not a layout name", value)
		}
		t.Layout = value
	case "flags":
		t.Flags, err = p.parseFlags(value)
	case "ranks":
		t.Ranks, err = strconv.Atoi(value)
		if err != nil || t.Ranks < 1 || t.Ranks > 1024 {
			return p.errf("ranks: %q: want a world size from 1 to 1024", value)
		}
	case "step":
		if value != "." && !stepRE.MatchString(value) {
			return p.errf("step: %q: want the step's folder with {step} in it, or \".\" for files in the root", value)
		}
		if err := p.checkPath(value, false); err != nil {
			return err
		}
		t.Step = value
	case "torch-save":
		for _, g := range strings.Fields(value) {
			if _, err := path.Match(g, ""); err != nil || strings.Contains(g, "/") {
				return p.errf("torch-save: %q is not a file name pattern (path.Match, no /)", g)
			}
			t.TorchSave = append(t.TorchSave, g)
		}
	case "deepspeed-world":
		if _, err := fmt.Sscanf(value, "dp=%d mp=%d", &t.DeepSpeedDP, &t.DeepSpeedMP); err != nil ||
			t.DeepSpeedDP < 1 || t.DeepSpeedMP < 1 || fmt.Sprintf("dp=%d mp=%d", t.DeepSpeedDP, t.DeepSpeedMP) != value {
			return p.errf("deepspeed-world: %q: want dp=<data-parallel world size> mp=<model-parallel world size>", value)
		}
	case "keep":
		t.Keep, err = strconv.Atoi(value)
		if err != nil || t.Keep < 1 {
			return p.errf("keep: %q: want the rotation's limit, 1 or more", value)
		}
	}
	return err
}

// parseFlags splits the flags as a shell would (single and double quotes
// group) and checks each against the flags the replay knows.
func (p *parser) parseFlags(s string) ([]Flag, error) {
	words, err := shellSplit(s)
	if err != nil {
		return nil, p.errf("flags: %v", err)
	}
	var out []Flag
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "--") {
			return nil, p.errf("flags: %q is not a --flag", w)
		}
		name, value, hasValue := strings.Cut(w[2:], "=")
		takes, ok := flagArity[name]
		switch {
		case !ok:
			return nil, p.errf("flags: --%s is not a flag the replay knows (known: --expected-ranks, --no-marker, --settle, --step-pattern)", name)
		case takes && !hasValue:
			if i+1 >= len(words) {
				return nil, p.errf("flags: --%s needs a value", name)
			}
			i++
			value = words[i]
		case !takes && hasValue && value != "true" && value != "false":
			return nil, p.errf("flags: --%s=%s: want true or false", name, value)
		}
		if err := checkFlagValue(name, value); err != nil {
			return nil, p.errf("flags: --%s %s: %v", name, value, err)
		}
		out = append(out, Flag{Name: name, Value: value})
	}
	return out, nil
}

func checkFlagValue(name, value string) error {
	switch name {
	case "expected-ranks":
		if n, err := strconv.Atoi(value); err != nil || n < 0 {
			return fmt.Errorf("want a count of ranks, 0 or more")
		}
	case "settle":
		if d, err := time.ParseDuration(value); err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration (5s)")
		}
	case "step-pattern":
		if _, err := regexp.Compile(value); err != nil {
			return err
		}
	}
	return nil
}

func shellSplit(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	var quote rune
	in := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// checkHeader runs at the first operation: every required key is there.
func (p *parser) checkHeader() error {
	var missing []string
	for _, k := range requiredOrder {
		if _, ok := p.header[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return p.errf("header: missing %s (FORMAT.md lists the keys)", strings.Join(missing, ", "))
	}
	return nil
}
