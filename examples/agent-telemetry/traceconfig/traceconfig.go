// Package traceconfig reads the files the Kagenti AgentTrace controller writes into the ConfigMap
// {workload}-trace, mounted at /etc/kagenti/trace (or $KAGENTI_TRACE_DIR), and notices when
// kubelet swaps in a new version. Standard library only, so any agent can copy it.
package traceconfig

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// The files of the trace ConfigMap, as agenttrace names them (docs/architecture.md §6). Load reads
// every one of them except FileSDKConfig, which is for an SDK's declarative-configuration parser
// (Load only reports its path).
const (
	FileEnv                         = "otel.env"
	FileSDKConfig                   = "otel-config.yaml"
	FileJSON                        = "config.json"
	FileEndpoint                    = "otel_endpoint"
	FileProtocol                    = "otel_protocol"
	FileCompression                 = "otel_compression"
	FileInsecure                    = "otel_insecure"
	FileTracesExporter              = "traces_exporter"
	FileZipkinEndpoint              = "zipkin_endpoint"
	FileSampler                     = "sampler"
	FileSamplerArg                  = "sampler_arg"
	FileServiceName                 = "service_name"
	FileResourceAttributes          = "resource_attributes"
	FileGenAIEnabled                = "genai_enabled"
	FileGenAICapturePrompts         = "genai_capture_prompts"
	FileGenAICaptureCompletions     = "genai_capture_completions"
	FileGenAICaptureModelParameters = "genai_capture_model_parameters"
	FileMLflowTrackingURI           = "mlflow_tracking_uri"
	FileMLflowExperimentName        = "mlflow_experiment_name"
	FilePrometheusPort              = "prometheus_port"
	FilePrometheusPath              = "prometheus_path"
)

// Files lists every file this package knows.
var Files = []string{
	FileEnv, FileSDKConfig, FileJSON, FileEndpoint, FileProtocol, FileCompression, FileInsecure,
	FileTracesExporter, FileZipkinEndpoint, FileSampler, FileSamplerArg, FileServiceName,
	FileResourceAttributes, FileGenAIEnabled, FileGenAICapturePrompts, FileGenAICaptureCompletions,
	FileGenAICaptureModelParameters, FileMLflowTrackingURI, FileMLflowExperimentName, FilePrometheusPort,
	FilePrometheusPath,
}

// Config is what an agent needs to set up its telemetry. Every file but otel.env is optional:
// agenttrace leaves out the OTLP files without an otlp exporter, zipkin_endpoint without a zipkin
// one, sampler_arg for samplers without a ratio and the mlflow / prometheus files when that
// integration is off; the matching fields are then zero (nil for the pointers).
type Config struct {
	// Env holds the OTEL_* variables of otel.env, ready for os.Setenv or an SDK's options.
	Env map[string]string
	// Endpoint is otel_endpoint: the first OTLP exporter's endpoint as written in the AgentTrace.
	Endpoint string
	// Insecure is otel_insecure.
	Insecure bool
	// Protocol is otel_protocol: grpc or http/protobuf.
	Protocol string
	// Compression is otel_compression: gzip or none.
	Compression string
	// TracesExporters is traces_exporter (the OTEL_TRACES_EXPORTER value) split at commas; empty
	// when it is "none".
	TracesExporters []string
	// ZipkinEndpoint is zipkin_endpoint: the zipkin exporter's URL (…/api/v2/spans).
	ZipkinEndpoint string
	// Sampler is sampler, an OTEL_TRACES_SAMPLER value.
	Sampler string
	// SamplerArg is sampler_arg, the ratio of the ratio samplers; nil for the others.
	SamplerArg *float64
	// ServiceName is service_name.
	ServiceName string
	// ResourceAttributes is resource_attributes, decoded (k=v pairs, values percent-encoded).
	ResourceAttributes map[string]string
	// GenAI is genai_enabled and genai_capture_*. agenttrace writes the capture flags false unless
	// enabled; act on them only when Enabled, as they are read as written.
	GenAI GenAI
	// MLflow is mlflow_tracking_uri and mlflow_experiment_name; nil when MLflow is off.
	MLflow *MLflow
	// Prometheus is prometheus_port and prometheus_path; nil when Prometheus is off.
	Prometheus *Prometheus
	// Resolved is config.json: everything agenttrace resolved, jaeger exporters included.
	Resolved *Resolved
	// SDKConfigFile is the path of otel-config.yaml (for OTEL_CONFIG_FILE), "" when absent.
	SDKConfigFile string
	// Version changes whenever any file changes.
	Version string
}

// GenAI says what GenAI instrumentation records.
type GenAI struct {
	Enabled                bool `json:"enabled"`
	CapturePrompts         bool `json:"capturePrompts"`
	CaptureCompletions     bool `json:"captureCompletions"`
	CaptureModelParameters bool `json:"captureModelParameters"`
}

// MLflow is the MLflow integration.
type MLflow struct {
	TrackingURI    string `json:"trackingUri"`
	ExperimentName string `json:"experimentName,omitempty"`
}

// Prometheus is where the agent serves metrics.
type Prometheus struct {
	Port int    `json:"port"`
	Path string `json:"path"`
}

// Resolved is config.json. Load rejects fields it does not know, so that a change to what
// agenttrace writes fails this package's tests until the reader follows.
type Resolved struct {
	Workload struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
	} `json:"workload"`
	ServiceName string     `json:"serviceName"`
	Exporters   []Exporter `json:"exporters"`
	Sampling    struct {
		Type    string `json:"type"`
		Sampler string `json:"sampler"`
		Rate    string `json:"rate,omitempty"`
	} `json:"sampling"`
	GenAI              GenAI             `json:"genai"`
	ResourceAttributes map[string]string `json:"resourceAttributes"`
	Integration        struct {
		MLflow     *MLflow     `json:"mlflow,omitempty"`
		Prometheus *Prometheus `json:"prometheus,omitempty"`
	} `json:"integration"`
}

// Exporter is one exporter of config.json.
type Exporter struct {
	Type        string `json:"type"`
	Endpoint    string `json:"endpoint,omitempty"`
	URL         string `json:"url,omitempty"`
	Protocol    string `json:"protocol,omitempty"`
	Compression string `json:"compression,omitempty"`
	Insecure    bool   `json:"insecure"`
	// Deprecated, when set, says why the exporter does not reach every SDK format (jaeger: none).
	Deprecated string `json:"deprecated,omitempty"`
}

// ErrNotConfigured means the directory has no otel.env: no AgentTrace targets this workload (the
// ConfigMap volume is optional, so the directory is then empty) — fall back to your defaults.
var ErrNotConfigured = errors.New("no AgentTrace configuration")

// Load reads dir. A malformed file is an error naming it.
func Load(dir string) (*Config, error) {
	files, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	envFile, ok := files[FileEnv]
	if !ok {
		return nil, ErrNotConfigured
	}
	env, err := ParseEnv(string(envFile))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, FileEnv), err)
	}
	r := reader{dir: dir, files: files}
	cfg := &Config{
		Env:             env,
		Endpoint:        r.str(FileEndpoint),
		Insecure:        r.boolean(FileInsecure),
		Protocol:        r.str(FileProtocol),
		Compression:     r.str(FileCompression),
		TracesExporters: r.list(FileTracesExporter),
		ZipkinEndpoint:  r.str(FileZipkinEndpoint),
		Sampler:         r.str(FileSampler),
		SamplerArg:      r.ratio(FileSamplerArg),
		ServiceName:     r.str(FileServiceName),
		GenAI: GenAI{
			Enabled:                r.boolean(FileGenAIEnabled),
			CapturePrompts:         r.boolean(FileGenAICapturePrompts),
			CaptureCompletions:     r.boolean(FileGenAICaptureCompletions),
			CaptureModelParameters: r.boolean(FileGenAICaptureModelParameters),
		},
		Version: versionOf(files),
	}
	if s, ok := r.read(FileResourceAttributes); ok {
		attrs, err := ParseResourceAttributes(s)
		r.fail(FileResourceAttributes, err)
		cfg.ResourceAttributes = attrs
	}
	if uri, ok := r.read(FileMLflowTrackingURI); ok {
		cfg.MLflow = &MLflow{TrackingURI: uri, ExperimentName: r.str(FileMLflowExperimentName)}
	}
	if _, ok := r.read(FilePrometheusPort); ok {
		cfg.Prometheus = &Prometheus{Port: r.port(FilePrometheusPort), Path: r.str(FilePrometheusPath)}
	}
	if s, ok := r.read(FileJSON); ok {
		cfg.Resolved = &Resolved{}
		r.fail(FileJSON, decodeStrict(s, cfg.Resolved))
	}
	if _, ok := r.read(FileSDKConfig); ok {
		cfg.SDKConfigFile = filepath.Join(dir, FileSDKConfig)
	}
	if r.err != nil {
		return nil, r.err
	}
	return cfg, nil
}

// ParseResourceAttributes parses an OTEL_RESOURCE_ATTRIBUTES value: comma-separated key=value
// pairs whose values are percent-encoded. An empty string is no attribute.
func ParseResourceAttributes(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("want key=value, got %q", pair)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("attribute %q given twice", k)
		}
		value, err := url.PathUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", k, err)
		}
		out[k] = value
	}
	return out, nil
}

func decodeStrict(s string, into any) error {
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(into); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}

// reader reads the optional files of one directory, as readDir read them, and keeps the first error.
type reader struct {
	dir   string
	files map[string][]byte
	err   error
}

func (r *reader) fail(name string, err error) {
	if err != nil && r.err == nil {
		r.err = fmt.Errorf("%s: %w", filepath.Join(r.dir, name), err)
	}
}

// read returns the file without a trailing newline; false when it does not exist.
func (r *reader) read(name string) (string, bool) {
	b, ok := r.files[name]
	return strings.TrimRight(string(b), "\r\n"), ok
}

func (r *reader) str(name string) string {
	s, _ := r.read(name)
	return s
}

func (r *reader) boolean(name string) bool {
	s, ok := r.read(name)
	if !ok {
		return false
	}
	switch strings.TrimSpace(s) {
	case "true":
		return true
	case "false":
		return false
	}
	r.fail(name, fmt.Errorf("want true or false, got %q", s))
	return false
}

func (r *reader) list(name string) []string {
	s, ok := r.read(name)
	if !ok || strings.TrimSpace(s) == "none" {
		return nil
	}
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
		if out[i] == "" || out[i] == "none" {
			r.fail(name, fmt.Errorf("want a comma-separated list of exporters or none, got %q", s))
			return nil
		}
	}
	return out
}

func (r *reader) ratio(name string) *float64 {
	s, ok := r.read(name)
	if !ok {
		return nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || f > 1 {
		r.fail(name, fmt.Errorf("want a ratio between 0 and 1, got %q", s))
		return nil
	}
	return &f
}

func (r *reader) port(name string) int {
	s, _ := r.read(name)
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 1 || p > 65535 {
		r.fail(name, fmt.Errorf("want a port number, got %q", s))
		return 0
	}
	return p
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

// readDir reads every visible file of dir once (kubelet's ..data indirection and its symlinks are
// followed by ReadFile). A directory that does not exist reads as empty: the volume is optional.
func readDir(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		switch {
		case err == nil:
			files[e.Name()] = b
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EISDIR):
			// removed mid-swap (the next poll sees the new state), or a directory
		default:
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
	}
	return files, nil
}

// versionOf hashes the files read: it changes whenever any of them does.
func versionOf(files map[string][]byte) string {
	h := sha256.New()
	for _, n := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(files[n]))
		h.Write(files[n])
	}
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
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
