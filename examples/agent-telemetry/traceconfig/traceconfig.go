// Package traceconfig reads the files the Kagenti AgentTrace controller writes into the ConfigMap
// {workload}-trace, mounted at /etc/kagenti/trace (or $KAGENTI_TRACE_DIR), and notices when
// kubelet swaps in a new version. Standard library only, so any agent can copy it.
package traceconfig

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultDir is where the injector mounts the trace ConfigMap.
const DefaultDir = "/etc/kagenti/trace"

// Dir is $KAGENTI_TRACE_DIR, else DefaultDir.
func Dir() string {
	if d := os.Getenv("KAGENTI_TRACE_DIR"); d != "" {
		return d
	}
	return DefaultDir
}

// Config is what an agent needs to set up its tracer provider.
type Config struct {
	// Env holds the OTEL_* variables of otel.env, ready for os.Setenv or an SDK's options.
	Env map[string]string
	// Endpoint is otel_endpoint: the first OTLP exporter's endpoint as written in the AgentTrace.
	Endpoint string
	// Insecure is otel_insecure.
	Insecure bool
	// Version changes whenever any file changes.
	Version string
}

// ErrNotConfigured means the directory has no otel.env: no AgentTrace targets this workload (the
// ConfigMap volume is optional, so the directory is then empty) — fall back to your defaults.
var ErrNotConfigured = errors.New("no AgentTrace configuration")

// Load reads dir.
func Load(dir string) (*Config, error) {
	envFile, err := os.ReadFile(filepath.Join(dir, "otel.env"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotConfigured
	}
	if err != nil {
		return nil, err
	}
	env, err := ParseEnv(string(envFile))
	if err != nil {
		return nil, fmt.Errorf("%s/otel.env: %w", dir, err)
	}
	version, err := hashDir(dir)
	if err != nil {
		return nil, err
	}
	return &Config{
		Env:      env,
		Endpoint: readTrimmed(dir, "otel_endpoint"),
		Insecure: readTrimmed(dir, "otel_insecure") == "true",
		Version:  version,
	}, nil
}

// ParseEnv parses KEY=value lines; '#' starts a comment line; single-quoted values are unquoted
// the way a POSIX shell would.
func ParseEnv(s string) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: want KEY=value, got %q", n, line)
		}
		if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
			v = strings.ReplaceAll(v[1:len(v)-1], `'\''`, `'`)
		}
		out[k] = v
	}
	return out, sc.Err()
}

func readTrimmed(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return strings.TrimSpace(string(b))
}

// hashDir hashes the visible files (kubelet's ..data indirection is followed by ReadFile).
func hashDir(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			continue // a directory, or a file removed mid-swap: the next poll sees the new state
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16], nil
}

// Watch calls onChange with the current configuration (nil when not configured) and then again
// whenever it changes, polling every interval until ctx ends. Polling is what works everywhere:
// kubelet updates ConfigMap volumes by an atomic symlink swap, which inotify on the files misses.
func Watch(ctx context.Context, dir string, interval time.Duration, onChange func(*Config, error)) {
	last := "unset"
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cfg, err := Load(dir)
		version := ""
		switch {
		case cfg != nil:
			version = cfg.Version
		case errors.Is(err, ErrNotConfigured):
			version, err = "none", nil
		default:
			version = "error:" + err.Error()
		}
		if version != last {
			last = version
			onChange(cfg, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
