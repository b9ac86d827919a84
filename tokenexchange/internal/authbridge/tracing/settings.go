// Package tracing exports the authbridge's OpenTelemetry spans where the workload's AgentTrace
// points: it reads the files kagenti-agenttrace renders into the ConfigMap {workload}-trace (mounted
// at /etc/kagenti/trace, contract.PathTrace), builds a TracerProvider with an OTLP exporter from
// them, and switches to a new one when the kubelet rewrites the files. Without an AgentTrace (no
// files) there is no provider: the proxies see a nil tracer, start no span and leave the requests'
// trace headers as they are.
package tracing

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The per-value files of the trace ConfigMap this package reads (agenttrace's
// internal/resources/configmap.go writes them; docs/agenttrace.md lists them). The per-value files
// are read rather than otel.env: each holds one value as written, with no shell quoting to undo,
// and the first OTLP exporter's endpoint as the user wrote it (host:port or URL).
const (
	FileEndpoint           = "otel_endpoint"
	FileProtocol           = "otel_protocol"
	FileCompression        = "otel_compression"
	FileInsecure           = "otel_insecure"
	FileTracesExporter     = "traces_exporter"
	FileSampler            = "sampler"
	FileSamplerArg         = "sampler_arg"
	FileServiceName        = "service_name"
	FileResourceAttributes = "resource_attributes"
)

// Protocols of FileProtocol (the AgentTrace's exporters[].protocol).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// maxFileSize bounds what is read of one file: the AgentTrace API bounds every value far below it.
const maxFileSize = 64 << 10

// Settings are what the trace files say about exporting spans.
type Settings struct {
	// Endpoint is the first OTLP exporter's endpoint as written: host:port, or an http(s) URL.
	Endpoint    string
	Protocol    string // ProtocolGRPC or ProtocolHTTP
	Compression string // "gzip" or "none"
	// Insecure: the transport is plaintext (insecure on host:port, or an http:// URL).
	Insecure   bool
	Sampler    string // OTEL_TRACES_SAMPLER's names
	SamplerArg float64
	// ServiceName is service.name; ResourceAttributes all the attributes, decoded.
	ServiceName        string
	ResourceAttributes map[string]string
}

// Load reads the trace files of dir. It returns ok false, and no error, when they configure no
// OTLP export: dir or otel_endpoint missing or empty, or traces_exporter naming no otlp exporter.
// A file that is present but malformed is an error naming it.
func Load(dir string) (s Settings, ok bool, err error) {
	read := func(name string) (string, error) {
		b, err := readBounded(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	var errs []error
	get := func(name string) string {
		v, err := read(name)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	s.Endpoint = get(FileEndpoint)
	exporters := get(FileTracesExporter)
	if err := errors.Join(errs...); err != nil {
		return Settings{}, false, err
	}
	if s.Endpoint == "" {
		return Settings{}, false, nil
	}
	if exporters != "" && !slices.Contains(strings.Split(exporters, ","), "otlp") {
		return Settings{}, false, nil
	}
	s.Protocol = get(FileProtocol)
	s.Compression = get(FileCompression)
	insecure := get(FileInsecure)
	s.Sampler = get(FileSampler)
	arg := get(FileSamplerArg)
	s.ServiceName = get(FileServiceName)
	attrs := get(FileResourceAttributes)
	if err := errors.Join(errs...); err != nil {
		return Settings{}, false, err
	}
	bad := func(file, value, want string) {
		errs = append(errs, fmt.Errorf("%s: %q is not %s", filepath.Join(dir, file), value, want))
	}
	if err := checkEndpoint(s.Endpoint); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, FileEndpoint), err))
	}
	switch s.Protocol {
	case "":
		s.Protocol = ProtocolGRPC // the AgentTrace's default
	case ProtocolGRPC, ProtocolHTTP:
	default:
		bad(FileProtocol, s.Protocol, `"grpc" or "http/protobuf"`)
	}
	switch s.Compression {
	case "":
		s.Compression = "none"
	case "gzip", "none":
	default:
		bad(FileCompression, s.Compression, `"gzip" or "none"`)
	}
	switch insecure {
	case "", "false":
	case "true":
		s.Insecure = true
	default:
		bad(FileInsecure, insecure, `"true" or "false"`)
	}
	if s.Sampler == "" {
		s.Sampler = "parentbased_always_on" // the OpenTelemetry default
	}
	if !slices.Contains(samplers, s.Sampler) {
		bad(FileSampler, s.Sampler, "one of "+strings.Join(samplers, ", "))
	}
	if strings.HasSuffix(s.Sampler, "traceidratio") {
		s.SamplerArg = 1
		if arg != "" {
			f, err := strconv.ParseFloat(arg, 64)
			if err != nil || f < 0 || f > 1 {
				bad(FileSamplerArg, arg, "a ratio between 0 and 1")
			}
			s.SamplerArg = f
		}
	}
	if s.ResourceAttributes, err = parseAttributes(attrs); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, FileResourceAttributes), err))
	}
	if err := errors.Join(errs...); err != nil {
		return Settings{}, false, err
	}
	return s, true, nil
}

// samplers are the OTEL_TRACES_SAMPLER values agenttrace renders, and parentbased_always_off.
var samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileSize)
	}
	return b, nil
}

// checkEndpoint accepts what the AgentTrace API accepts: host:port, or an http(s) URL with a host.
func checkEndpoint(e string) error {
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return err
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("%q is not an http(s) URL with a host", e)
		}
		return nil
	}
	host, port, err := splitHostPort(e)
	if err != nil {
		return fmt.Errorf("%q is neither host:port nor an http(s) URL: %w", e, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", e)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is not 1-65535", e, port)
	}
	return nil
}

func splitHostPort(e string) (string, string, error) {
	u, err := url.Parse("//" + e)
	if err != nil {
		return "", "", err
	}
	if u.Path != "" || u.RawQuery != "" || u.User != nil {
		return "", "", errors.New("only host:port")
	}
	return u.Hostname(), u.Port(), nil
}

// parseAttributes decodes resource_attributes: k=v pairs separated by commas, values
// percent-encoded (as OTEL_RESOURCE_ATTRIBUTES).
func parseAttributes(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", pair)
		}
		value, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %q: %w", k, err)
		}
		out[k] = value
	}
	return out, nil
}
