package resources

import (
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agenttrace/api/v1alpha1"
	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
)

// Keys of the trace ConfigMap (docs/architecture.md §6). Each becomes a file in contract.PathTrace
// (/etc/kagenti/trace).
const (
	KeyOTelEndpoint            = "otel_endpoint"
	KeyOTelProtocol            = "otel_protocol"
	KeyOTelCompression         = "otel_compression"
	KeyOTelInsecure            = "otel_insecure"
	KeyTracesExporter          = "traces_exporter"
	KeyZipkinEndpoint          = "zipkin_endpoint"
	KeySampler                 = "sampler"
	KeySamplerArg              = "sampler_arg"
	KeyServiceName             = "service_name"
	KeyResourceAttributes      = "resource_attributes"
	KeyGenAIEnabled            = "genai_enabled"
	KeyGenAICapturePrompts     = "genai_capture_prompts"
	KeyGenAICaptureCompletions = "genai_capture_completions"
	KeyGenAICaptureModelParams = "genai_capture_model_parameters"
	KeyMLflowTrackingURI       = "mlflow_tracking_uri"
	KeyMLflowExperimentName    = "mlflow_experiment_name"
	KeyPrometheusPort          = "prometheus_port"
	KeyPrometheusPath          = "prometheus_path"
	KeyOTelEnv                 = "otel.env"
	KeyOTelConfigYAML          = "otel-config.yaml"
	KeyConfigJSON              = "config.json"
	LabelAgentTrace            = "kagenti.io/agenttrace"
	// Component is the trace ConfigMap's contract.ComponentLabel value.
	Component = "trace-config"
)

// MakeConfigMap renders the ConfigMap {workload}-trace for the AgentTrace cr targeting w. Owner
// reference, managed-by label and content hash are added by kit.Applier.
func MakeConfigMap(cr *v1alpha1.AgentTrace, w *duck.Workload) (*corev1.ConfigMap, error) {
	cfg := ResolveConfig(cr, w)
	data, err := RenderFiles(cfg)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      configmap.TraceName(w.Name()),
			Namespace: cr.Namespace,
			Labels: map[string]string{
				contract.ComponentLabel: Component,
				contract.PartOfLabel:    contract.PartOf,
				LabelAgentTrace:         cr.Name,
			},
		},
		Data: data,
	}, nil
}

// RenderFiles returns every file of the trace ConfigMap for cfg.
func RenderFiles(cfg Config) (map[string]string, error) {
	data := map[string]string{
		KeyTracesExporter:          cfg.TracesExporters(),
		KeySampler:                 cfg.Sampling.Sampler,
		KeyServiceName:             cfg.ServiceName,
		KeyResourceAttributes:      cfg.ResourceAttributesString(),
		KeyGenAIEnabled:            strconv.FormatBool(cfg.GenAI.Enabled),
		KeyGenAICapturePrompts:     strconv.FormatBool(cfg.GenAI.CapturePrompts),
		KeyGenAICaptureCompletions: strconv.FormatBool(cfg.GenAI.CaptureCompletions),
		KeyGenAICaptureModelParams: strconv.FormatBool(cfg.GenAI.CaptureModelParameters),
	}
	if otlp, ok := cfg.FirstOTLP(); ok {
		data[KeyOTelEndpoint] = otlp.Endpoint
		data[KeyOTelProtocol] = otlp.Protocol
		data[KeyOTelCompression] = otlp.Compression
		data[KeyOTelInsecure] = strconv.FormatBool(otlp.Insecure)
	}
	if z, ok := cfg.exporter(v1alpha1.ExporterZipkin); ok {
		data[KeyZipkinEndpoint] = z.URL
	}
	if cfg.Sampling.Rate != "" {
		data[KeySamplerArg] = cfg.Sampling.Rate
	}
	if m := cfg.Integration.MLflow; m != nil {
		data[KeyMLflowTrackingURI] = m.TrackingURI
		if m.ExperimentName != "" {
			data[KeyMLflowExperimentName] = m.ExperimentName
		}
	}
	if p := cfg.Integration.Prometheus; p != nil {
		data[KeyPrometheusPort] = strconv.Itoa(int(p.Port))
		data[KeyPrometheusPath] = p.Path
	}
	data[KeyOTelEnv] = RenderEnv(cfg)
	otelYAML, err := RenderSDKConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", KeyOTelConfigYAML, err)
	}
	data[KeyOTelConfigYAML] = otelYAML
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", KeyConfigJSON, err)
	}
	data[KeyConfigJSON] = string(js) + "\n"
	return data, nil
}
