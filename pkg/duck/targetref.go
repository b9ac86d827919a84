package duck

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TargetRef names a workload in the namespace of the object that holds the reference.
//
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="has(self.apiVersion) || self.kind in ['Deployment','StatefulSet','DaemonSet','ReplicaSet','Job','CronJob']",message="apiVersion is required for kinds other than Deployment, StatefulSet, DaemonSet, ReplicaSet, Job and CronJob"
type TargetRef struct {
	// APIVersion of the workload, e.g. apps/v1. Optional for the built-in kinds, whose apiVersion
	// is implied by the kind. At most 317 characters: a 253-character group, '/', a 63-character
	// version.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?$`
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the workload: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, or any
	// kind whose objects carry a pod template at spec.template.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`

	// Name of the workload, in the same namespace as the referring object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// builtinKinds maps each built-in PodSpecable kind to its group/version.
var builtinKinds = map[string]schema.GroupVersion{
	"Deployment":  {Group: "apps", Version: "v1"},
	"StatefulSet": {Group: "apps", Version: "v1"},
	"DaemonSet":   {Group: "apps", Version: "v1"},
	"ReplicaSet":  {Group: "apps", Version: "v1"},
	"Job":         {Group: "batch", Version: "v1"},
	"CronJob":     {Group: "batch", Version: "v1"},
}

// BuiltinKinds returns the GroupVersionKinds of the built-in PodSpecable workloads.
func BuiltinKinds() []schema.GroupVersionKind {
	out := make([]schema.GroupVersionKind, 0, len(builtinKinds))
	for _, k := range []string{"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"} {
		out = append(out, builtinKinds[k].WithKind(k))
	}
	return out
}

// DefaultAPIVersion returns the apiVersion implied by a built-in kind.
func DefaultAPIVersion(kind string) (string, bool) {
	gv, ok := builtinKinds[kind]
	if !ok {
		return "", false
	}
	return gv.String(), true
}

// Default fills in apiVersion for the built-in kinds.
func (r *TargetRef) Default() {
	if r.APIVersion == "" {
		if v, ok := DefaultAPIVersion(r.Kind); ok {
			r.APIVersion = v
		}
	}
}

// GroupVersionKind returns the reference's GVK, defaulting apiVersion for the built-in kinds.
func (r TargetRef) GroupVersionKind() (schema.GroupVersionKind, error) {
	r.Default()
	if r.APIVersion == "" {
		return schema.GroupVersionKind{}, fmt.Errorf("apiVersion is required for kind %q", r.Kind)
	}
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("invalid apiVersion %q: %w", r.APIVersion, err)
	}
	return gv.WithKind(r.Kind), nil
}

// Validate reports what is wrong with the reference, with field paths under path. It mirrors the
// CRD schema rules so code paths that bypass the API server (webhooks, tests) agree with it.
func (r TargetRef) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Kind == "" {
		errs = append(errs, field.Required(path.Child("kind"), "kind of the workload"))
	}
	if r.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), "name of the workload"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(r.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), r.Name, msg))
		}
	}
	if r.Kind != "" {
		if _, err := r.GroupVersionKind(); err != nil {
			errs = append(errs, field.Invalid(path.Child("apiVersion"), r.APIVersion, err.Error()))
		}
	}
	return errs
}

// String renders the reference as Kind/name (with the group when it is not a built-in kind).
func (r TargetRef) String() string {
	gvk, err := r.GroupVersionKind()
	if err != nil || gvk.Group == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "." + gvk.Group + "/" + r.Name
}
