package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// The errors a new user meets first (a wrong bucket, endpoint, key, secret
// or region, no keys at all, a missing folder, no agent) are made for real
// against versitygw, and each one's line must be in
// docs/troubleshooting.md, with its values masked (URLs, paths, quoted
// names, parentheses): a reworded message, or one the page never showed,
// fails here rather than leave a user with a line no page explains.
func TestTroubleshootingNamesRealErrors(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(1000, 3))
	ferry(t, srv, "push", "-q", "--to", url, "--step", "1", src).must(t, 0)
	noKeys := []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent"}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
	}{
		{"missing bucket", nil, []string{"list", "--from", "s3://no-such-bucket-ferry/run"}, 1},
		{"wrong secret", []string{"AWS_SECRET_ACCESS_KEY=wrong"}, []string{"list", "--from", url}, 1},
		{"unknown key", []string{"AWS_ACCESS_KEY_ID=nobody"}, []string{"restore", "--from", url, "--to", t.TempDir()}, 1},
		{"wrong region", []string{"AWS_REGION=eu-west-9"}, []string{"list", "--from", url}, 1},
		{"no keys", noKeys, []string{"restore", "--from", url, "--to", t.TempDir()}, 1},
		{"wrong endpoint", []string{"S3_ENDPOINT_URL=http://127.0.0.1:1"}, []string{"list", "--from", url}, 1},
		{"https to a plain HTTP server", []string{"S3_ENDPOINT_URL=" + strings.Replace(srv.Endpoint, "http://", "https://", 1)}, []string{"list", "--from", url}, 1},
		{"no keys, a metadata service that refuses", withEnv(noKeys, "AWS_EC2_METADATA_DISABLED=false", "AWS_EC2_METADATA_SERVICE_ENDPOINT="+refusingIMDS(t)),
			[]string{"list", "--from", url}, 1},
		{"nothing committed", nil, []string{"restore", "--from", url + "-elsewhere", "--to", t.TempDir()}, 3},
		{"missing push source", nil, []string{"push", "--to", url, "--step", "2", filepath.Join(src, "missing")}, 2},
		{"no agent", nil, []string{"status", "--state-dir", t.TempDir()}, 1},
		{"doctor: missing bucket", nil, []string{"doctor", "--quiet", "--watch", src, "--to", "s3://no-such-bucket-ferry/run"}, 1},
		{"doctor: no keys", noKeys, []string{"doctor", "--quiet", "--watch", src, "--to", url}, 1},
	}
	page := troubleshootingPage(t)
	for _, c := range cases {
		r := ferryEnv(t, append(srv.Env(), c.env...), c.args...)
		if c.name == "wrong region" && r.code == 0 {
			t.Logf("%s: this server accepts any region; not checked", c.name)
			continue
		}
		if r.code != c.code {
			t.Errorf("%s: ferry %s: exit %d, want %d\n%s", c.name, strings.Join(c.args, " "), r.code, c.code, r.stderr)
			continue
		}
		if strings.Contains(r.stderr, "SDK ") {
			t.Errorf("%s: the SDK's own log line reached the user:\n%s", c.name, r.stderr)
		}
		lines := []string{ferryErrorLine(t, r.stderr)}
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "fail ") { // doctor's failed checks
				lines = append(lines, l)
			}
		}
		for _, line := range lines {
			if want := troubleshootingKey(line); !strings.Contains(page, want) {
				t.Errorf("%s: docs/troubleshooting.md does not show what ferry prints:\n  %s\n(masked: %q)", c.name, line, want)
			}
		}
	}
}

// troubleshootingPage is docs/troubleshooting.md as one masked line, its
// code marks dropped.
func troubleshootingPage(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	return maskMessage(strings.Join(strings.Fields(strings.ReplaceAll(string(data), "`", "")), " "))
}

var (
	maskURL    = regexp.MustCompile(`[a-z][a-z0-9+]*://[^\s"()]*[^\s"():]`)
	maskPath   = regexp.MustCompile(`(^|[\s(])/[^\s:"()]+`)
	maskQuoted = regexp.MustCompile(`"[^"]*"`)
	maskParen  = regexp.MustCompile(`\([^()]*\)`)
	whatClause = regexp.MustCompile(`^(list|push|restore|agent|show|verify|copy|prune|flush|status)\b`)
)

// maskMessage replaces what differs between one user's error and
// another's (URLs, absolute paths, quoted names, what is in parentheses).
func maskMessage(s string) string {
	s = maskURL.ReplaceAllString(s, "URL")
	s = maskPath.ReplaceAllString(s, "${1}PATH")
	s = maskQuoted.ReplaceAllString(s, `"X"`)
	for prev := ""; prev != s; {
		prev, s = s, maskParen.ReplaceAllString(s, "(X)")
	}
	return s
}

// troubleshootingKey is the part of an error line the page must show: the
// line masked, without "ferry: " and the step that failed ("list URL").
func troubleshootingKey(line string) string {
	clauses := strings.Split(maskMessage(strings.TrimPrefix(line, "ferry: ")), ": ")
	if len(clauses) > 1 && whatClause.MatchString(clauses[0]) {
		clauses = clauses[1:]
	}
	return strings.Join(clauses, ": ")
}

// refusingIMDS is an EC2 instance metadata service that answers every
// request 403, as on a cloud VM with no role for this process.
func refusingIMDS(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "forbidden", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
