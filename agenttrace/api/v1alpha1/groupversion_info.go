// Package v1alpha1 contains the kagenti.io/v1alpha1 API of this pillar.
//
// +kubebuilder:object:generate=true
// +groupName=kagenti.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every Kagenti custom resource.
	GroupVersion = schema.GroupVersion{Group: "kagenti.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
