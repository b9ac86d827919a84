package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestRetriedErrorsLogNoStackTrace: a registration that fails is logged at error level on every
// retry; each line is one JSON object with the message and the error, not a Go stack trace.
func TestRetriedErrorsLogNoStackTrace(t *testing.T) {
	out := filepath.Join(t.TempDir(), "log")
	cfg := logConfig(zapcore.InfoLevel)
	cfg.OutputPaths = []string{out}
	log, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	log.Error("registration failed; retrying", zap.String("client", "team-a/agent"), zap.Error(os.ErrDeadlineExceeded))
	_ = log.Sync()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(b))
	if strings.Contains(line, "stacktrace") || strings.Count(line, "\n") != 0 {
		t.Errorf("an error line carries a stack trace:\n%s", line)
	}
	if !strings.Contains(line, `"msg":"registration failed; retrying"`) || !strings.Contains(line, `"error":"i/o timeout"`) {
		t.Errorf("the error line lost its message or error:\n%s", line)
	}
}
