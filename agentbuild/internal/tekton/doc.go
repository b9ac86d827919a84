// Package tekton holds the part of Tekton Pipelines' tekton.dev/v1 API this controller writes and
// reads, as small Go types with Tekton's JSON field names, so that the binary does not link
// github.com/tektoncd/pipeline and the dependency tree that comes with it (knative, OpenTelemetry
// exporters, gRPC, CEL: about 250 packages and several MiB of resident memory).
//
// TaskSpec and the types under it are complete: step ConfigMaps are decoded strictly into them, so
// they must know every field Tekton knows. Pipeline, PipelineRun and the types under them are
// partial: they carry what the controller sets and what it reads back. Objects of these kinds are
// therefore only ever created, patched or deleted, never updated from a decoded copy (an update
// would drop the fields Tekton wrote that these types do not have).
//
// The tests keep these types honest against Tekton's own (a test-only dependency): every field here
// exists in Tekton's type with the same JSON name and shape, the TaskSpec types have exactly
// Tekton's fields, every rendered Pipeline and PipelineRun decodes strictly into Tekton's types,
// passes Tekton's validation and marshals back to the same JSON, and Tekton's PipelineRun status
// reads back the same through these types.
//
// +kubebuilder:object:generate=true
package tekton
