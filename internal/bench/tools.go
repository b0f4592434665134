package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// tool knows how to run one client for each phase.
type tool struct {
	name string
	// verifies says whether the tool checks a content hash of every byte
	// it moves (ferry: BLAKE3 end to end; the peers: none).
	verifies bool
	version  string
	settings string // the non-default settings used, for the report
	upload   func(dataDir, prefix string) child
	restore  func(prefix, dir string) child
	// restoreSource is the prefix the restore phase reads, prepared once.
	restoreSource string
}

// toolset holds the paths and environments shared by the tools.
type toolset struct {
	cfg      Config
	srv      *server
	work     string
	env      []string
	awsConf  string
	stateDir string
	step     int
}

func newToolset(cfg Config, srv *server, work string) (*toolset, error) {
	ts := &toolset{cfg: cfg, srv: srv, work: work}
	home := filepath.Join(work, "home")
	ts.stateDir = filepath.Join(work, "ferry-state")
	ts.awsConf = filepath.Join(work, "aws", "config")
	for _, d := range []string{home, ts.stateDir, filepath.Dir(ts.awsConf)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	ts.env = baseEnv(home)
	if srv.caFile != "" {
		// Every tool trusts the server's throwaway CA this way: ferry
		// (aws-sdk-go-v2), s5cmd (aws-sdk-go) and aws-cli (botocore).
		ts.env = append(ts.env, "AWS_CA_BUNDLE="+srv.caFile)
	}
	// What `aws configure set default.s3.max_concurrent_requests 16` and
	// `aws configure set default.s3.multipart_chunksize 64MB` write: the
	// same concurrency and part size as ferry's defaults.
	conf := "[default]\nregion = " + region + "\ns3 =\n    max_concurrent_requests = 16\n    multipart_chunksize = 64MB\n"
	if err := os.WriteFile(ts.awsConf, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return ts, nil
}

func (ts *toolset) get(name string) tool {
	switch name {
	case "ferry":
		return ts.ferry()
	case "aws":
		return ts.aws()
	default:
		return ts.s5()
	}
}

func (ts *toolset) ferry() tool {
	env := append(append([]string(nil), ts.env...),
		"S3_ENDPOINT_URL="+ts.srv.endpoint, "FERRY_STATE_DIR="+ts.stateDir)
	return tool{
		name: "ferry", verifies: true,
		version:  firstLine(ts.cfg.ferry, "--version"),
		settings: "defaults: 64 MiB parts (push), 32 MiB ranged GETs (restore), requests sized by bytes (16 parts or ranges, at most 256 requests; restore starts at 16 GETs and grows with the round trip); --quiet",
		upload: func(dataDir, prefix string) child {
			ts.step++
			return child{env: env, argv: []string{ts.cfg.ferry, "push", "--quiet",
				"--to", "s3://" + bucket + "/" + prefix, "--step", fmt.Sprint(ts.step), dataDir}}
		},
		restore: func(prefix, dir string) child {
			return child{env: env, argv: []string{ts.cfg.ferry, "restore", "--quiet",
				"--from", "s3://" + bucket + "/" + prefix, "--to", dir}}
		},
		restoreSource: "src-ferry",
	}
}

func (ts *toolset) aws() tool {
	env := append(append([]string(nil), ts.env...),
		"AWS_CONFIG_FILE="+ts.awsConf,
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(ts.work, "aws", "credentials"),
		"AWS_PAGER=")
	ep := ts.srv.endpoint
	return tool{
		name:     "aws",
		version:  firstLine(ts.cfg.aws, "--version"),
		settings: "s3.max_concurrent_requests = 16, s3.multipart_chunksize = 64MB (isolated AWS_CONFIG_FILE); --no-progress",
		upload: func(dataDir, prefix string) child {
			return child{env: env, argv: []string{ts.cfg.aws, "--endpoint-url", ep, "s3", "cp", "--recursive", "--no-progress",
				dataDir, "s3://" + bucket + "/" + prefix + "/"}}
		},
		restore: func(prefix, dir string) child {
			return child{env: env, argv: []string{ts.cfg.aws, "--endpoint-url", ep, "s3", "cp", "--recursive", "--no-progress",
				"s3://" + bucket + "/" + prefix + "/", dir}}
		},
		restoreSource: "src-plain",
	}
}

func (ts *toolset) s5() tool {
	ep := ts.srv.endpoint
	return tool{
		name:     "s5cmd",
		version:  firstLine(ts.cfg.s5cmd, "version"),
		settings: "defaults: --numworkers 256, cp --concurrency 5 (parts per file), --part-size 50 (MiB)",
		upload: func(dataDir, prefix string) child {
			return child{env: ts.env, argv: []string{ts.cfg.s5cmd, "--endpoint-url", ep, "cp",
				dataDir + "/*", "s3://" + bucket + "/" + prefix + "/"}}
		},
		restore: func(prefix, dir string) child {
			return child{env: ts.env, argv: []string{ts.cfg.s5cmd, "--endpoint-url", ep, "cp",
				"s3://" + bucket + "/" + prefix + "/*", dir + "/"}}
		},
		restoreSource: "src-plain",
	}
}

// firstLine runs bin with args and returns the first line it prints.
func firstLine(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return "unknown (" + err.Error() + ")"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
