package peer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// authSkew is how far a request's time may be from the server's clock.
const authSkew = 5 * time.Minute

// authScheme names the Authorization header's scheme.
const authScheme = "Ferry-HMAC"

// KeyFromToken derives the peers' shared key from a token the scheduler
// hands every node of the job (restore --peer-token).
func KeyFromToken(token string) []byte {
	sum := sha256.Sum256([]byte("ferry-peer-token-v1\n" + token))
	return sum[:]
}

// KeyLabel is what a node's store credentials sign to derive the shared
// key when no token is given: every node of a job holds the same
// credentials for the same bucket and prefix, and nobody without them can
// derive it.
func KeyLabel(bucket, prefix string) string {
	return "ferry-peer-v1\n" + bucket + "\n" + prefix
}

// sign sets r's Authorization header: an HMAC-SHA256 under key of the
// method, path, query and time.
func sign(r *http.Request, key []byte, now time.Time) {
	t := strconv.FormatInt(now.Unix(), 10)
	r.Header.Set("Authorization", authScheme+" t="+t+",s="+mac(key, r.Method, r.URL.Path, r.URL.RawQuery, t))
}

func mac(key []byte, method, path, query, t string) string {
	h := hmac.New(sha256.New, key)
	fmt.Fprintf(h, "%s\n%s\n%s\n%s", method, path, query, t)
	return hex.EncodeToString(h.Sum(nil))
}

var errUnauthorized = errors.New("not signed with the job's peer key")

// verify checks r's Authorization header.
func verify(r *http.Request, key []byte, now time.Time) error {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), authScheme+" ")
	if !ok {
		return errUnauthorized
	}
	var t, s string
	for _, kv := range strings.Split(v, ",") {
		switch k, val, _ := strings.Cut(kv, "="); k {
		case "t":
			t = val
		case "s":
			s = val
		}
	}
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return errUnauthorized
	}
	if d := now.Sub(time.Unix(sec, 0)); d > authSkew || d < -authSkew {
		return fmt.Errorf("%w: the request's time is %s from this node's clock", errUnauthorized, d.Round(time.Second))
	}
	want := mac(key, r.Method, r.URL.Path, r.URL.RawQuery, t)
	if !hmac.Equal([]byte(s), []byte(want)) {
		return errUnauthorized
	}
	return nil
}
