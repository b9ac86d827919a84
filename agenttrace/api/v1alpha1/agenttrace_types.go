package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/pkg/duck"
)

// AgentTrace configures the OpenTelemetry instrumentation of an agent's own code. The controller
// renders the spec into the ConfigMap {workload}-trace, which the injector mounts (optional: true)
// at /etc/kagenti/trace in every user container; kubelet refreshes the files, so changes reach
// running pods without a restart.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=atr,categories=kagenti
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.targetRef.kind`,priority=1
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="ConfigMap",type=string,JSONPath=`.status.configMapName`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.configuredPods`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentTrace struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AgentTraceSpec `json:"spec"`
	// Status defaults to observedGeneration 0, so that tools read an AgentTrace the controller has
	// not seen yet as in progress.
	// +kubebuilder:default={observedGeneration:0}
	Status AgentTraceStatus `json:"status,omitempty"`
}

// AgentTraceSpec is the telemetry configuration of one workload.
type AgentTraceSpec struct {
	// TargetRef is the workload whose agent code reads this configuration.
	TargetRef duck.TargetRef `json:"targetRef"`

	// Exporters receive the spans, at most one per type. Only OTLP exporters reach otel.env and
	// otel-config.yaml as OTLP settings; jaeger is kept in config.json only (deprecated, see status).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	// +kubebuilder:validation:XValidation:rule="self.all(e, self.exists_one(f, f.type == e.type))",message="exporter types must be unique: configure at most one exporter per type"
	Exporters []Exporter `json:"exporters"`

	// Sampling decides which traces are recorded. Omitted: parent-based always_on (the
	// OpenTelemetry default).
	// +optional
	Sampling *Sampling `json:"sampling,omitempty"`

	// GenAI configures the OpenTelemetry GenAI semantic conventions (gen_ai.* attributes).
	// +optional
	GenAI *GenAI `json:"genai,omitempty"`

	// ResourceAttributes are added to every span's resource. service.name defaults to the
	// workload's name. At most 64, values up to 1024 characters, names and values together up to
	// 8192: every attribute is written several times into the trace ConfigMap (percent-encoded in
	// otel.env, whose OTEL_RESOURCE_ATTRIBUTES line must stay under the kernel's 128 KiB limit for
	// one environment string).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 255 && k.matches('^[A-Za-z_][A-Za-z0-9_.\\\\-]*$'))",message="resource attribute names must start with a letter or '_' and contain only letters, digits, '_', '.' and '-' (at most 255 characters)"
	// +kubebuilder:validation:XValidation:rule="self.map(k, k.size() + self[k].size()).sum() <= 8192",message="resource attribute names and values must total at most 8192 characters"
	ResourceAttributes map[string]ResourceAttributeValue `json:"resourceAttributes,omitempty"`

	// Integration configures observability platforms the agent reports to besides its exporters.
	// +optional
	Integration *Integration `json:"integration,omitempty"`
}

// ResourceAttributeValue is the value of one resource attribute.
// +kubebuilder:validation:MaxLength=1024
type ResourceAttributeValue string

// ExporterType names a span exporter.
// +kubebuilder:validation:Enum=otlp;jaeger;zipkin;console
type ExporterType string

const (
	ExporterOTLP    ExporterType = "otlp"
	ExporterJaeger  ExporterType = "jaeger"
	ExporterZipkin  ExporterType = "zipkin"
	ExporterConsole ExporterType = "console"
)

// Protocol is the OTLP transport.
// +kubebuilder:validation:Enum=grpc;http/protobuf
type Protocol string

const (
	ProtocolGRPC         Protocol = "grpc"
	ProtocolHTTPProtobuf Protocol = "http/protobuf"
)

// Compression of exported payloads.
// +kubebuilder:validation:Enum=gzip;none
type Compression string

const (
	CompressionGzip Compression = "gzip"
	CompressionNone Compression = "none"
)

// Exporter is one destination of the agent's spans.
//
// +kubebuilder:validation:XValidation:rule="self.type == 'console' || has(self.endpoint)",message="endpoint is required for otlp, jaeger and zipkin exporters",fieldPath=".endpoint",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.type != 'console' || !has(self.endpoint)",message="a console exporter writes to stdout and takes no endpoint",fieldPath=".endpoint"
// +kubebuilder:validation:XValidation:rule="self.type == 'otlp' || !has(self.protocol)",message="protocol applies only to otlp exporters",fieldPath=".protocol"
// +kubebuilder:validation:XValidation:rule="self.type == 'otlp' || !has(self.compression)",message="compression applies only to otlp exporters",fieldPath=".compression"
type Exporter struct {
	// Type of the exporter: otlp, zipkin, console, or jaeger (deprecated: OpenTelemetry SDKs no
	// longer ship a Jaeger exporter; point an otlp exporter at Jaeger's OTLP port 4317 instead).
	Type ExporterType `json:"type"`

	// Endpoint is host:port (e.g. otel-collector.observability:4317) or an http(s) URL.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^(\\\\[[0-9A-Fa-f:.]+\\\\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?):[0-9]{1,5}$') ? int(self.substring(self.lastIndexOf(':') + 1)) >= 1 && int(self.substring(self.lastIndexOf(':') + 1)) <= 65535 : (isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != '')",message="endpoint must be host:port with a port in 1-65535 (e.g. otel-collector.observability:4317) or an http(s) URL (e.g. http://otel-collector.observability:4318)"
	Endpoint string `json:"endpoint,omitempty"`

	// Protocol of an otlp exporter. Default grpc.
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`

	// Compression of an otlp exporter. Default none.
	// +optional
	Compression Compression `json:"compression,omitempty"`

	// Insecure disables TLS towards a host:port endpoint (an http:// URL is always plaintext).
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// SamplingType names a sampler.
// +kubebuilder:validation:Enum=always_on;always_off;probabilistic;parent_based_probabilistic
type SamplingType string

const (
	SamplingAlwaysOn                 SamplingType = "always_on"
	SamplingAlwaysOff                SamplingType = "always_off"
	SamplingProbabilistic            SamplingType = "probabilistic"
	SamplingParentBasedProbabilistic SamplingType = "parent_based_probabilistic"
)

// Sampling is the trace sampler of the agent's tracer provider.
//
// +kubebuilder:validation:XValidation:rule="!(self.type in ['probabilistic', 'parent_based_probabilistic']) || has(self.rate)",message="rate is required for probabilistic sampling",fieldPath=".rate",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.type in ['probabilistic', 'parent_based_probabilistic'] || !has(self.rate)",message="rate applies only to probabilistic and parent_based_probabilistic sampling",fieldPath=".rate"
type Sampling struct {
	// Type of the sampler.
	Type SamplingType `json:"type"`

	// Rate is the fraction of traces sampled, 0 to 1, for the probabilistic types.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	Rate Rate `json:"rate,omitempty"`
}

// GenAI configures the OpenTelemetry GenAI semantic conventions.
//
// +kubebuilder:validation:XValidation:rule="self.enabled || !((has(self.capturePrompts) && self.capturePrompts) || (has(self.captureCompletions) && self.captureCompletions) || (has(self.captureModelParameters) && self.captureModelParameters))",message="capturePrompts, captureCompletions and captureModelParameters require enabled: true"
type GenAI struct {
	// Enabled turns on the GenAI semantic conventions (gen_ai.* span attributes).
	Enabled bool `json:"enabled"`
	// CapturePrompts records the input messages (may contain sensitive data).
	// +optional
	CapturePrompts bool `json:"capturePrompts,omitempty"`
	// CaptureCompletions records the model's output messages (may contain sensitive data).
	// +optional
	CaptureCompletions bool `json:"captureCompletions,omitempty"`
	// CaptureModelParameters records request parameters such as temperature and max_tokens.
	// +optional
	CaptureModelParameters bool `json:"captureModelParameters,omitempty"`
}

// Integration configures observability platforms.
type Integration struct {
	// +optional
	MLflow *MLflow `json:"mlflow,omitempty"`
	// +optional
	Prometheus *Prometheus `json:"prometheus,omitempty"`
}

// MLflow is the MLflow tracking server the agent logs runs and traces to.
//
// +kubebuilder:validation:XValidation:rule="!self.enabled || has(self.trackingUri)",message="trackingUri is required when mlflow is enabled",fieldPath=".trackingUri",reason=FieldValueRequired
type MLflow struct {
	Enabled bool `json:"enabled"`
	// TrackingURI of the MLflow server, an http(s) URL.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="trackingUri must be an http(s) URL, e.g. http://mlflow.ml-platform:5000"
	TrackingURI string `json:"trackingUri,omitempty"`
	// ExperimentName groups the agent's runs.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ExperimentName string `json:"experimentName,omitempty"`
}

// Prometheus exposes the agent's metrics for scraping.
type Prometheus struct {
	Enabled bool `json:"enabled"`
	// Port the agent serves metrics on.
	// +optional
	// +kubebuilder:default=9464
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// Path of the metrics endpoint.
	// +optional
	// +kubebuilder:default="/metrics"
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._~/-]*$`
	Path string `json:"path,omitempty"`
}

// Phase summarises the AgentTrace's state.
// +kubebuilder:validation:Enum=Pending;Active;Error
type Phase string

const (
	PhasePending Phase = "Pending"
	PhaseActive  Phase = "Active"
	PhaseError   Phase = "Error"
)

// Condition types: Ready (with Reconciling and Stalled, see duck.Status) summarises the
// AgentTrace; TargetResolved and ConfigMapReady are agenttrace's own.
const (
	ConditionReady          = duck.ConditionReady
	ConditionTargetResolved = "TargetResolved"
	ConditionConfigMapReady = "ConfigMapReady"
)

// Reasons of the Ready condition, and of Reconciling or Stalled next to it. A Ready=False reason is
// either Reconciling (it resolves by itself: kstatus InProgress, Argo CD Progressing) or Stalled
// (nothing changes until someone changes the AgentTrace, its target or the cluster: kstatus
// Failed, Argo CD Degraded). Target resolution adds duck.ReasonTargetNotFound (Reconciling: the
// workload is watched), duck.ReasonUnsupportedKind and duck.ReasonInvalidTargetRef (Stalled).
const (
	// ReasonActive: Ready=True; the ConfigMap holds this generation's configuration.
	ReasonActive = "Active"
	// ReasonTargetNotInjected: Ready=True; the ConfigMap is written but the workload's pod template
	// neither is injected nor mounts it, so the agent does not see the files yet.
	ReasonTargetNotInjected = "TargetNotInjected"
	// ReasonDeprecatedExporter: Ready=True; a jaeger or zipkin exporter is configured.
	ReasonDeprecatedExporter = "DeprecatedExporter"
	// ReasonConflict (Stalled): an older AgentTrace configures the same workload.
	ReasonConflict = "Conflict"
	// ReasonConfigMapNotOwned (Stalled): a ConfigMap of that name belongs to someone else. The
	// controller checks again every --not-owned-retry and recovers once it is gone.
	ReasonConfigMapNotOwned = "ConfigMapNotOwned"
	// ReasonApplyFailed (Reconciling): the API server refused the ConfigMap write; retried.
	ReasonApplyFailed = "ApplyFailed"
)

// Reasons of the other conditions.
const (
	// ReasonResolved (TargetResolved=True): the workload exists and has a pod template.
	ReasonResolved = "Resolved"
	// ReasonConfigMapApplied (ConfigMapReady=True): the ConfigMap holds this generation.
	ReasonConfigMapApplied = "Applied"
	// ReasonTargetNotResolved (ConfigMapReady=Unknown): nothing is written until the target resolves.
	ReasonTargetNotResolved = "TargetNotResolved"
)

// AgentTraceStatus is what the controller observed and did.
type AgentTraceStatus struct {
	// observedGeneration and conditions: Ready (the summary), Reconciling or Stalled (present only
	// while True), TargetResolved and ConfigMapReady.
	duck.Status `json:",inline"`
	// Phase: Pending (waiting for the target), Active (ConfigMap written), Error (needs a fix).
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// ConfigMapName is the ConfigMap holding the rendered configuration.
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`
	// ConfiguredPods counts the target's running pods that mount the trace ConfigMap.
	// +optional
	ConfiguredPods int32 `json:"configuredPods"`
}

// AgentTraceList is a list of AgentTraces.
//
// +kubebuilder:object:root=true
type AgentTraceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AgentTrace `json:"items"`
}

// GetStatus returns the status model shared by every Kagenti resource.
func (t *AgentTrace) GetStatus() *duck.Status { return &t.Status.Status }

// GetTargetRef lets pkg/duck index AgentTraces by the workload they configure.
func (t *AgentTrace) GetTargetRef() *duck.TargetRef { return &t.Spec.TargetRef }

func init() {
	SchemeBuilder.Register(&AgentTrace{}, &AgentTraceList{})
}
