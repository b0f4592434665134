package s3store

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A store that answers is not failing: a 404 to a HEAD (a node-done agent
// looking for a manifest not written yet, every few seconds) neither logs
// "still retrying S3 requests" at warn nor extends a failure streak, while
// a 503 after a streak of failures still does. On the old code each 404
// counted as a failure and was logged at warn once the streak passed 3 s.
func TestAnsweredIsNotRetrying(t *testing.T) {
	for _, c := range []struct {
		status int
		warn   bool
	}{{404, false}, {412, false}, {403, false}, {503, true}, {429, true}} {
		core, logs := observer.New(zapcore.WarnLevel)
		m := &attemptMiddleware{log: zap.New(core), failSince: time.Now().Add(-10 * time.Second)}
		next := middleware.FinalizeHandlerFunc(func(context.Context, middleware.FinalizeInput) (middleware.FinalizeOutput, middleware.Metadata, error) {
			resp := &smithyhttp.Response{Response: &http.Response{StatusCode: c.status}}
			return middleware.FinalizeOutput{}, middleware.Metadata{}, &smithyhttp.ResponseError{Response: resp, Err: http.ErrNoLocation}
		})
		if _, _, err := m.HandleFinalize(context.Background(), middleware.FinalizeInput{}, next); err == nil {
			t.Fatal("the error was lost")
		}
		if got := logs.FilterMessage("still retrying S3 requests").Len() > 0; got != c.warn {
			t.Errorf("status %d: warned %v, want %v", c.status, got, c.warn)
		}
		m.mu.Lock()
		streak := !m.failSince.IsZero()
		m.mu.Unlock()
		if streak != c.warn {
			t.Errorf("status %d: failure streak kept %v, want %v", c.status, streak, c.warn)
		}
	}
}
