package bench

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/internal/wanlink"
)

// Config is every flag of ferry-bench, converted once by ParseFlags.
type Config struct {
	files       int
	size        int64
	smallFiles  int   // files of the small-file set; 0: no such set
	smallSize   int64 // bytes of each
	rounds      int
	warmup      int
	tools       []string
	phases      []string
	outDir      string
	workDir     string
	keepWork    bool
	rssSizes    []int64
	idle        time.Duration
	skipB3      bool
	perfProfile bool
	tls         bool
	// wan, when set, puts toxiproxy between every tool and the server.
	wan       *wanlink.Link
	toxiproxy string
	// peerNodes are the node counts of the peers phase.
	peerNodes []int

	ferry, trainsim, versitygw, s5cmd, aws, b3sum string
}

// ParseFlags converts the command line (without the program name) into a
// Config; BENCH_QUICK=1 in the environment is -quick.
func ParseFlags(args []string) (Config, error) {
	fs := flag.NewFlagSet("ferry-bench", flag.ContinueOnError)
	var c Config
	raw := c.define(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if raw.wan != "" {
		l, err := wanlink.Parse(raw.wan)
		if err != nil {
			return c, err
		}
		c.wan = &l
	}
	if raw.quick {
		c.files, raw.size, c.rounds, c.idle = 4, "64MiB", 1, 10*time.Second
		if !flagSet(fs, "rss-sizes") {
			raw.rss = "256MiB,1GiB"
		}
		if !flagSet(fs, "small") {
			raw.small = "400x256KiB"
		}
	}
	if err := c.convert(raw); err != nil {
		return c, err
	}
	for _, p := range []*string{&c.ferry, &c.trainsim, &c.versitygw, &c.s5cmd, &c.aws, &c.b3sum} {
		if abs, err := filepath.Abs(*p); err == nil && strings.Contains(*p, "/") {
			*p = abs
		}
	}
	return c, nil
}

// rawFlags are the flags Config holds converted: sizes, lists, the link.
type rawFlags struct {
	quick                                       bool
	size, small, tools, phases, rss, wan, nodes string
}

// define declares every flag on fs: those Config holds as they are into
// c, the others into the rawFlags it returns.
func (c *Config) define(fs *flag.FlagSet) *rawFlags {
	var raw rawFlags
	fs.BoolVar(&raw.quick, "quick", os.Getenv("BENCH_QUICK") == "1", "smoke test: 4 x 64MiB and 400x256KiB, 1 round, no 16 GiB file, 10 s idle (env BENCH_QUICK=1)")
	fs.IntVar(&c.files, "files", 8, "files in the checkpoint set")
	fs.StringVar(&raw.size, "size", "256MiB", "size of each file")
	fs.StringVar(&raw.small, "small", "2000x256KiB", "many-small-files set, COUNTxSIZE over 8 rank folders, compared after the big set (empty: none)")
	fs.IntVar(&c.rounds, "rounds", 3, "measured rounds per tool and phase")
	fs.IntVar(&c.warmup, "warmup", 1, "warm-up rounds per tool and phase (not counted)")
	fs.StringVar(&raw.tools, "tools", "ferry,aws,s5cmd", "tools to compare")
	fs.StringVar(&raw.phases, "phases", "upload,restore,rss,blake3,agent,durable,interference", "what to measure (also: peers)")
	fs.StringVar(&raw.rss, "rss-sizes", "1GiB,16GiB", "single-file sizes for the push peak-RSS check")
	fs.DurationVar(&c.idle, "idle", 60*time.Second, "how long to watch the idle agent")
	fs.BoolVar(&c.perfProfile, "perf", false, "also record one profiled ferry push and restore with perf (client and server)")
	fs.StringVar(&c.outDir, "out", "bench-results", "directory for bench.md, bench.json and profiles")
	fs.StringVar(&c.workDir, "work", "", "scratch directory for data, server and restores (default: a new temp dir)")
	fs.BoolVar(&c.keepWork, "keep", false, "keep the scratch directory")
	fs.StringVar(&c.ferry, "ferry", "bin/ferry", "ferry binary")
	fs.StringVar(&c.trainsim, "trainsim", "bin/ferry-trainsim", "ferry-trainsim binary (writes the step the agent uploads)")
	fs.StringVar(&c.versitygw, "versitygw", "tools/bin/versitygw", "versitygw binary")
	fs.StringVar(&c.s5cmd, "s5cmd", "tools/bin/s5cmd", "s5cmd binary")
	fs.StringVar(&c.aws, "aws", "/usr/bin/aws", "aws-cli (Debian's awscli package)")
	fs.StringVar(&c.b3sum, "b3sum", "/usr/bin/b3sum", "b3sum binary")
	fs.BoolVar(&c.skipB3, "no-b3sum", false, "skip the b3sum comparison")
	fs.BoolVar(&c.tls, "tls", false, "serve HTTPS (a throwaway CA handed to every tool with AWS_CA_BUNDLE), as R2 is HTTPS-only")
	fs.StringVar(&raw.wan, "wan", "", "reach the server through toxiproxy: RTT,RATE per connection each way, e.g. 80ms,50MB (the internet to R2)")
	fs.StringVar(&c.toxiproxy, "toxiproxy", "tools/bin/toxiproxy/server", "toxiproxy server binary (Shopify/toxiproxy cmd/server), for -wan")
	fs.StringVar(&raw.nodes, "peer-nodes", "4,8", "node counts of the peers phase (-phases peers: N ferry restores at once, alone and with --peers)")
	return &raw
}

// convert fills c's sizes and lists from raw and checks them together.
func (c *Config) convert(raw *rawFlags) error {
	var err error
	if c.size, err = units.ParseBytes(raw.size); err != nil || c.size <= 0 {
		return fmt.Errorf("-size %q: %v", raw.size, err)
	}
	if c.smallFiles, c.smallSize, err = parseCountSize(raw.small); err != nil {
		return fmt.Errorf("-small: %w", err)
	}
	for _, s := range splitList(raw.rss) {
		n, err := units.ParseBytes(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("-rss-sizes %q: %v", s, err)
		}
		c.rssSizes = append(c.rssSizes, n)
	}
	c.tools, c.phases = splitList(raw.tools), splitList(raw.phases)
	for _, s := range splitList(raw.nodes) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			return fmt.Errorf("-peer-nodes %q: want node counts of at least 2", s)
		}
		c.peerNodes = append(c.peerNodes, n)
	}
	c.peerNodes = sortedInts(c.peerNodes)
	if c.has("peers") && len(c.peerNodes) == 0 {
		return fmt.Errorf("-phases peers needs -peer-nodes")
	}
	if c.files < 1 || c.rounds < 1 || c.warmup < 0 {
		return fmt.Errorf("-files and -rounds must be at least 1, -warmup at least 0")
	}
	for _, t := range c.tools {
		if t != "ferry" && t != "aws" && t != "s5cmd" {
			return fmt.Errorf("-tools: unknown tool %q (ferry, aws, s5cmd)", t)
		}
	}
	return nil
}

// parseCountSize parses COUNTxSIZE ("2000x256KiB"); an empty string is
// zero files.
func parseCountSize(s string) (int, int64, error) {
	if strings.TrimSpace(s) == "" {
		return 0, 0, nil
	}
	count, size, ok := strings.Cut(strings.TrimSpace(s), "x")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not COUNTxSIZE (e.g. 2000x256KiB)", s)
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("%q: count %q is not a whole number of files >= 1", s, count)
	}
	bytes, err := units.ParseBytes(size)
	if err != nil {
		return 0, 0, fmt.Errorf("%q: %w", s, err)
	}
	if bytes <= 0 {
		return 0, 0, fmt.Errorf("%q: the size must be above zero", s)
	}
	return n, bytes, nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (c Config) has(phase string) bool {
	for _, p := range c.phases {
		if p == phase {
			return true
		}
	}
	return false
}
