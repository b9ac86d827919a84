package kit

import (
	"context"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kagenti/platform/pkg/configmap/identity"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// Result says what Apply did.
type Result string

const (
	Created   Result = "Created"
	Updated   Result = "Updated"
	Unchanged Result = "Unchanged"
)

// Applier writes the objects a custom resource owns (its ConfigMaps, netpol's NetworkPolicies),
// only when their content changed, and never takes over one that belongs to someone else.
type Applier struct {
	// Client reads (a cached reader is fine: a stale read only costs a conflict retry) and writes.
	Client client.Client
	// APIReader reads from the API server when the Client's cache does not show an object that
	// exists (not yet seen, or outside a label-filtered cache), so that ownership is decided on
	// the stored object. Nil means Client.
	APIReader client.Reader
	// Scheme knows the owner's type, for the owner reference (unstructured owners carry their own).
	Scheme *runtime.Scheme
	// ManagedBy is the value of app.kubernetes.io/managed-by, e.g. kagenti-tokenexchange.
	ManagedBy string
}

// NotOwnedError means an object of that name exists and belongs to someone else; Apply leaves it
// alone, and the controller reports it (rename or delete it).
type NotOwnedError struct {
	Kind  string
	Name  string
	Owner string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s %q exists and is not managed by this controller (%s); rename or delete it", e.Kind, e.Name, e.Owner)
}

// ContentHash is the hash of a ConfigMap's data and binaryData, independent of map order
// (identity.ContentHash, which kagenti-authbridge computes for the files it runs).
func ContentHash(cm *corev1.ConfigMap) string {
	return identity.ContentHash(cm.Data, cm.BinaryData)
}

// Apply makes the ConfigMap desired.Name in desired.Namespace hold desired's data, labels and
// annotations, owned (controller reference) by owner. It writes nothing when the stored object
// already matches, creates it when missing and retries updates on conflicts. Content is compared by
// hash, so a cache holding digests (DigestTransform) serves as well as one holding the content.
func (a *Applier) Apply(ctx context.Context, desired *corev1.ConfigMap, owner client.Object) (Result, error) {
	want := desired.DeepCopy()
	metav1.SetMetaDataAnnotation(&want.ObjectMeta, contract.ContentHashAnnotation, ContentHash(want))
	return ApplyObject(ctx, a, want, owner, Content[*corev1.ConfigMap]{
		UpToDate: func(have, want *corev1.ConfigMap) bool {
			return observedHash(have) == want.Annotations[contract.ContentHashAnnotation]
		},
		Copy: func(dst, src *corev1.ConfigMap) {
			dst.Data, dst.BinaryData = src.Data, src.BinaryData
			delete(dst.Annotations, digestAnnotation)
		},
	})
}

// Content says what of an object of type T a controller writes besides its labels, annotations and
// owner reference (ConfigMaps: data; NetworkPolicies: spec).
type Content[T client.Object] struct {
	// UpToDate reports whether the stored object have already holds want's content.
	UpToDate func(have, want T) bool
	// Copy copies src's content into dst.
	Copy func(dst, src T)
}

// ApplyObject makes the object desired names hold desired's content (per c), labels and
// annotations, labelled managed-by a.ManagedBy and controlled by owner, with Apply's rules: nothing
// is written when it already matches; an object controlled by another owner, or made by someone
// else, is left alone with a *NotOwnedError; one labelled as ours without an owner (its owner was
// recreated) is adopted; conflicts are retried. Labels and annotations others added are kept.
func ApplyObject[T client.Object](ctx context.Context, a *Applier, desired T, owner client.Object, c Content[T]) (Result, error) {
	want := desired.DeepCopyObject().(T)
	labels := want.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[contract.ManagedByLabel] = a.ManagedBy
	want.SetLabels(labels)
	if err := controllerutil.SetControllerReference(owner, want, a.Scheme); err != nil {
		return "", err
	}
	kind := kindOf(want, a.Scheme)

	result := Unchanged
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		have := newObject(want)
		err := a.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
		if apierrors.IsNotFound(err) {
			err = a.Client.Create(ctx, want.DeepCopyObject().(T))
			if err == nil {
				result = Created
				return nil
			}
			if !apierrors.IsAlreadyExists(err) {
				return err
			}
			// The cache has not seen it (lagging, or a label-filtered cache): ask the API server.
			have = newObject(want)
			err = a.reader().Get(ctx, client.ObjectKeyFromObject(want), have)
		}
		if err != nil {
			return err
		}
		if err := a.checkOwnership(kind, have, owner); err != nil {
			return err
		}
		if c.UpToDate(have, want) && metadataUpToDate(have, want) {
			result = Unchanged
			return nil
		}
		merged := have.DeepCopyObject().(T)
		c.Copy(merged, want)
		merged.SetLabels(mergeStrings(merged.GetLabels(), want.GetLabels()))
		merged.SetAnnotations(mergeStrings(merged.GetAnnotations(), want.GetAnnotations()))
		merged.SetOwnerReferences(want.GetOwnerReferences())
		if err := a.Client.Update(ctx, merged); err != nil {
			return err
		}
		result = Updated
		return nil
	})
	return result, err
}

func (a *Applier) reader() client.Reader {
	if a.APIReader != nil {
		return a.APIReader
	}
	return a.Client
}

// checkOwnership refuses to take over an object that another object controls or that a user made.
func (a *Applier) checkOwnership(kind string, have, owner client.Object) error {
	if ref := metav1.GetControllerOf(have); ref != nil {
		if ref.UID != owner.GetUID() {
			return &NotOwnedError{Kind: kind, Name: have.GetName(), Owner: fmt.Sprintf("controlled by %s %s", ref.Kind, ref.Name)}
		}
		return nil
	}
	if have.GetLabels()[contract.ManagedByLabel] != a.ManagedBy {
		return &NotOwnedError{Kind: kind, Name: have.GetName(), Owner: "no owner reference and no " + contract.ManagedByLabel + "=" + a.ManagedBy + " label"}
	}
	return nil // ours, but orphaned (e.g. its owner was recreated): adopt it
}

// metadataUpToDate: have carries want's labels and annotations and is controlled by want's owner.
func metadataUpToDate(have, want client.Object) bool {
	for k, v := range want.GetLabels() {
		if have.GetLabels()[k] != v {
			return false
		}
	}
	for k, v := range want.GetAnnotations() {
		if have.GetAnnotations()[k] != v {
			return false
		}
	}
	ref := metav1.GetControllerOf(have)
	return ref != nil && ref.UID == want.GetOwnerReferences()[0].UID
}

// newObject returns an empty object of want's type (Get must not decode into a used one).
func newObject[T client.Object](want T) T {
	return reflect.New(reflect.TypeOf(want).Elem()).Interface().(T)
}

func kindOf(obj client.Object, scheme *runtime.Scheme) string {
	if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil {
		return gvk.Kind
	}
	return reflect.TypeOf(obj).Elem().Name()
}

func mergeStrings(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}
