package tekton

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is tekton.dev/v1.
var GroupVersion = schema.GroupVersion{Group: "tekton.dev", Version: "v1"}

var schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// AddToScheme registers Pipeline and PipelineRun (and their lists) under tekton.dev/v1.
var AddToScheme = schemeBuilder.AddToScheme

func init() {
	schemeBuilder.Register(&Pipeline{}, &PipelineList{}, &PipelineRun{}, &PipelineRunList{})
}
