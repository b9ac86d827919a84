package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/kagenti/platform/pkg/configmap/appprobe"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// Source is where a role's configuration comes from: the defaults the injector put into its
// environment, the workload's identity, and the mounted ConfigMap directory.
type Source struct {
	Defaults authconfig.Spec
	Workload authconfig.Workload
	// PodNameFrom says where Workload.PodName came from (authconfig.PodNameOrHostname).
	PodNameFrom string
	// Dir holds the ConfigMap {workload}-token-exchange's config.yaml: the identity directory,
	// where injection v4 projects it beside the identity files (which Load skips), or the
	// ConfigMap volume of v1 to v3. config.yaml may be missing (the ConfigMap is optional: no
	// TokenExchange means the defaults apply), and so may the directory.
	Dir string
	// AppProbes are the agent's original probes the injector rewrote to the status port
	// (contract.AppProbesVariable of the identity defaults), served by AppProbeHandler.
	AppProbes map[string]appprobe.AppProbe
}

// SourceFromEnv reads the defaults and the workload from the environment, completed by the
// injector's identity directory (IdentityLookup; "" for the environment alone), and by the
// hostname as the pod's name when neither names it.
func SourceFromEnv(dir, identityDir string) (Source, error) {
	lookup, err := IdentityLookup(identityDir, os.LookupEnv)
	if err != nil {
		return Source{}, err
	}
	d, err := authconfig.DefaultsFromEnv(lookup)
	if err != nil {
		return Source{}, err
	}
	w, from := authconfig.PodNameOrHostname(authconfig.WorkloadFromEnv(lookup), os.Hostname)
	raw, _ := lookup(contract.AppProbesVariable)
	probes, err := appprobe.Parse(raw)
	if err != nil {
		return Source{}, err
	}
	return Source{Defaults: d, Workload: w, PodNameFrom: from, Dir: dir, AppProbes: probes}, nil
}

// Snapshot is one loaded configuration.
type Snapshot struct {
	Config authconfig.Config
	// ContentHash identifies the ConfigMap content it came from (authconfig.ContentHash); empty
	// when no ConfigMap was mounted and the defaults alone apply.
	ContentHash string
	LoadedAt    time.Time
}

// Load reads the directory and resolves config.yaml over the defaults. The hash covers every file
// the ConfigMap projects (keys), so it matches the controller's kagenti.io/content-hash.
func (s Source) Load() (Snapshot, error) {
	files, err := readConfigMapDir(s.Dir)
	if err != nil {
		return Snapshot{}, err
	}
	var spec authconfig.Spec
	if raw, ok := files[authconfig.ConfigFile]; ok {
		if spec, err = authconfig.Parse(raw); err != nil {
			return Snapshot{}, fmt.Errorf("%s: %w", filepath.Join(s.Dir, authconfig.ConfigFile), err)
		}
	}
	c, err := authconfig.Resolve(s.Defaults, spec, s.Workload)
	if err != nil {
		from := "the environment alone"
		if _, ok := files[authconfig.ConfigFile]; ok {
			from = "the environment, overridden by " + filepath.Join(s.Dir, authconfig.ConfigFile)
		}
		return Snapshot{}, fmt.Errorf("the configuration from %s is invalid:\n%w", from, err)
	}
	return Snapshot{Config: c, ContentHash: authconfig.ContentHash(files), LoadedAt: time.Now()}, nil
}

// readConfigMapDir returns the files of a ConfigMap volume by key, skipping the kubelet's own
// "..data"-style entries and the identity volume's own files (the downward API's, which share the
// directory with the ConfigMap's since injection v4), so that the hash covers the ConfigMap's
// keys alone, as the controller's does. A missing directory has no files.
func readConfigMapDir(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") || authconfig.IsIdentityFile(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		info, err := os.Stat(path) // follows the kubelet's symlinks
		if err != nil || info.IsDir() {
			continue
		}
		if info.Size() > authconfig.MaxConfigSize {
			return nil, fmt.Errorf("%s: %d bytes exceed the limit of %d", path, info.Size(), authconfig.MaxConfigSize)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		files[e.Name()] = b
	}
	return files, nil
}

// Config follows a role's configuration: it reloads on every change of the directory, keeps
// running the last good configuration when a load fails, and holds the startup settings (ports,
// interception) at the values the pod started with.
type Config struct {
	source  Source
	log     *zap.Logger
	started authconfig.Config
	// startedWithoutContent: no ConfigMap content was in the volume when the role started (the
	// ConfigMap did not exist yet, or its content was rejected): its startup settings are the
	// injector's defaults.
	startedWithoutContent bool

	current atomic.Pointer[Snapshot]
	mu      sync.Mutex
	lastErr error
	pending []string
	subs    []func(Snapshot)
}

// NewConfig loads the configuration once. When config.yaml cannot be used, the role starts on
// the injector's defaults and reports the error (not ready) until a good file arrives; only when
// the defaults themselves are invalid does it fail.
func NewConfig(src Source, log *zap.Logger) (*Config, error) {
	c := &Config{source: src, log: log}
	snap, err := src.Load()
	if err != nil {
		defaults := src
		defaults.Dir = ""
		fallback, derr := defaults.Load()
		if derr != nil {
			return nil, fmt.Errorf("the injector's defaults are invalid: %w", derr)
		}
		log.Error("configuration rejected at start; running the injector's defaults until it is fixed", zap.Error(err))
		c.lastErr = err
		snap = fallback
	}
	c.started = snap.Config
	c.startedWithoutContent = snap.ContentHash == ""
	c.current.Store(&snap)
	log.Info("configuration loaded", zap.String("contentHash", snap.ContentHash), zap.String("configHash", snap.Config.Hash()),
		zap.String("podNameFrom", src.PodNameFrom))
	return c, nil
}

// Current returns the configuration in effect. Safe for concurrent use; never blocks.
func (c *Config) Current() Snapshot { return *c.current.Load() }

// Started returns the configuration the pod started with.
func (c *Config) Started() authconfig.Config { return c.started }

// StartedWithoutContent says that the role started on the injector's defaults alone: no
// ConfigMap content was in its volume (or it was rejected), so its startup settings are the
// defaults whatever the ConfigMap says later.
func (c *Config) StartedWithoutContent() bool { return c.startedWithoutContent }

// OnChange registers f to run after each change of the configuration in effect.
func (c *Config) OnChange(f func(Snapshot)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = append(c.subs, f)
}

// Err returns why the latest configuration was rejected, or nil when the latest one is in effect.
func (c *Config) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// PendingRestart lists the startup settings of the latest good configuration that differ from
// the ones in effect since the pod started.
func (c *Config) PendingRestart() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending
}

// Reload loads the directory now and, when it changed, puts the new configuration into effect.
func (c *Config) Reload() {
	snap, err := c.source.Load()
	c.mu.Lock()
	if err != nil {
		changedErr := c.lastErr == nil || c.lastErr.Error() != err.Error()
		c.lastErr = err
		c.mu.Unlock()
		if changedErr {
			c.log.Error("configuration rejected; keeping the last good one", zap.Error(err))
		}
		return
	}
	recovered := c.lastErr != nil
	c.lastErr = nil
	pending := authconfig.PendingRestart(c.started, snap.Config)
	snap.Config = snap.Config.WithStartupSettingsOf(c.started)
	old := c.current.Load()
	if !recovered && old.ContentHash == snap.ContentHash && old.Config.Hash() == snap.Config.Hash() {
		c.mu.Unlock()
		return
	}
	c.current.Store(&snap)
	c.pending = pending
	subs := append([]func(Snapshot){}, c.subs...)
	c.mu.Unlock()
	c.log.Info("configuration changed", zap.String("contentHash", snap.ContentHash), zap.String("configHash", snap.Config.Hash()),
		zap.Strings("pendingRestart", pending))
	for _, f := range subs {
		f(snap)
	}
}

// Run follows the directory until ctx ends.
func (c *Config) Run(ctx context.Context, poll time.Duration) {
	WatchDir(ctx, c.source.Dir, poll, c.log, c.Reload)
}
