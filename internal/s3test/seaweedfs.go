package s3test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The S3 servers a test binary can run: versitygw by default, SeaweedFS's
// S3 gateway (`weed server -s3`) with EnvServer=seaweedfs (make
// test-compat), so that the suites that matter run against a second real
// server.
const (
	// EnvServer names the server: "versitygw" (or empty) or "seaweedfs".
	EnvServer = "FERRY_S3TEST_SERVER"
	// EnvSeaweedFS is the weed binary's path (default tools/bin/weed).
	EnvSeaweedFS = "FERRY_SEAWEEDFS"

	Versitygw = "versitygw"
	SeaweedFS = "seaweedfs"
)

// ServerKind returns the server EnvServer asks for.
func ServerKind() string {
	if os.Getenv(EnvServer) == SeaweedFS {
		return SeaweedFS
	}
	return Versitygw
}

// weedPorts are the ports of one `weed server`: each part listens on an
// HTTP and a gRPC port (the default gRPC port, HTTP + 10000, is not ours
// to take).
type weedPorts struct {
	master, masterGRPC, volume, volumeGRPC, filer, filerGRPC, s3GRPC int
}

// freePorts picks n free ports of 127.0.0.1, all distinct.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func newWeedPorts() (weedPorts, error) {
	p, err := freePorts(7)
	if err != nil {
		return weedPorts{}, err
	}
	return weedPorts{master: p[0], masterGRPC: p[1], volume: p[2], volumeGRPC: p[3], filer: p[4], filerGRPC: p[5], s3GRPC: p[6]}, nil
}

// weedIdentities writes the S3 gateway's identity file: one identity,
// allowed everything, with the server's credentials.
func weedIdentities(dir, access, secret string) (string, error) {
	type cred struct {
		AccessKey string `json:"accessKey"`
		SecretKey string `json:"secretKey"`
	}
	type identity struct {
		Name        string   `json:"name"`
		Credentials []cred   `json:"credentials"`
		Actions     []string `json:"actions"`
	}
	cfg := struct {
		Identities []identity `json:"identities"`
	}{[]identity{{Name: "ferrytest", Credentials: []cred{{access, secret}},
		Actions: []string{"Admin", "Read", "List", "Tagging", "Write"}}}}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "s3-identities.json")
	return path, os.WriteFile(path, raw, 0o600)
}

// weedArgs are the arguments of `weed server` for s, which listens for S3
// on s.addr.
func (s *Server) weedArgs() ([]string, error) {
	_, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		return nil, err
	}
	if s.weed == (weedPorts{}) {
		if s.weed, err = newWeedPorts(); err != nil {
			return nil, err
		}
	}
	ids, err := weedIdentities(filepath.Dir(s.Dir), s.AccessKey, s.SecretKey)
	if err != nil {
		return nil, fmt.Errorf("write the S3 identities: %w", err)
	}
	p := s.weed
	args := []string{"server",
		"-dir=" + s.Dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + strconv.Itoa(p.master), "-master.port.grpc=" + strconv.Itoa(p.masterGRPC),
		"-volume.port=" + strconv.Itoa(p.volume), "-volume.port.grpc=" + strconv.Itoa(p.volumeGRPC),
		"-filer.port=" + strconv.Itoa(p.filer), "-filer.port.grpc=" + strconv.Itoa(p.filerGRPC),
		"-filer.localSocket=" + filepath.Join(filepath.Dir(s.Dir), "filer.sock"),
		"-s3", "-s3.port=" + port, "-s3.port.grpc=" + strconv.Itoa(p.s3GRPC),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.config=" + ids,
		"-s3.localSocket=" + filepath.Join(filepath.Dir(s.Dir), "s3.sock"),
		// A bucket is made by CreateBucket only, as on R2 and S3: a
		// push to a mistyped bucket must fail, not create it.
		"-s3.autoCreateBucket=false",
		// Every test makes buckets of its own, and each bucket is a
		// collection with volumes of its own: many small volumes.
		"-volume.max=0", "-master.volumeSizeLimitMB=64",
		"-master.telemetry=false",
	}
	if s.certFile != "" {
		args = append(args, "-s3.cert.file="+s.certFile, "-s3.key.file="+s.keyFile)
	}
	return args, nil
}

// weedEnv is master.toml's settings for tests: one volume per collection
// grown at a time, and no hold on the first volume of a fresh cluster.
var weedEnv = []string{
	"WEED_MASTER_VOLUME_GROWTH_COPY_1=1",
	"WEED_MASTER_VOLUME_GROWTH_ALLOCATION_DEFERRAL=0s",
}

// weedReady waits until the gateway answers a signed request and a first
// write lands: the master, a volume server and the filer are all up.
func (s *Server) weedReady(p *process, client *http.Client) error {
	c := plainClient(s, client, -1)
	deadline := time.Now().Add(weedStartTimeout)
	const bucket = "ferry-s3test-ready"
	var err error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering: %v", p.err)
		default:
		}
		if err = weedWrite(c, bucket); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no write possible after %v: %w", weedStartTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// weedStartTimeout bounds a SeaweedFS start: four servers, each waiting
// for the master.
const weedStartTimeout = 60 * time.Second

func weedWrite(c *s3.Client, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	if err != nil && !strings.Contains(err.Error(), "BucketAlreadyOwnedByYou") && !strings.Contains(err.Error(), "BucketAlreadyExists") {
		return err
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("ready"), Body: strings.NewReader("ready")})
	if err != nil {
		return err
	}
	_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("ready")})
	return errors.Join(err)
}
