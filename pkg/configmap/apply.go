package configmap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

const (
	// ManagedByLabel marks objects a Kagenti controller created; its value is kagenti-<pillar>.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ContentHashAnnotation records the hash of data and binaryData as last written.
	ContentHashAnnotation = "kagenti.io/content-hash"
)

// Result says what Apply did.
type Result string

const (
	Created   Result = "Created"
	Updated   Result = "Updated"
	Unchanged Result = "Unchanged"
)

// Applier writes ConfigMaps owned by a custom resource, only when their content changed.
type Applier struct {
	// Client reads (a cached reader is fine: a stale read only costs a conflict retry) and writes.
	Client client.Client
	// Scheme knows the owner's type, for the owner reference.
	Scheme *runtime.Scheme
	// ManagedBy is the value of app.kubernetes.io/managed-by, e.g. kagenti-tokenexchange.
	ManagedBy string
}

// NotOwnedError means a ConfigMap of that name exists and belongs to someone else; Apply leaves it alone.
type NotOwnedError struct {
	Name  string
	Owner string
}

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("ConfigMap %q exists and is not managed by this controller (%s); rename or delete it", e.Name, e.Owner)
}

// ContentHash is the hash of a ConfigMap's data and binaryData, independent of map order.
func ContentHash(cm *corev1.ConfigMap) string {
	h := sha256.New()
	write := func(prefix string, keys []string, value func(string) []byte) {
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(h, "%s%d:%s", prefix, len(k), k)
			v := value(k)
			fmt.Fprintf(h, "%d:", len(v))
			h.Write(v)
		}
	}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	write("d", keys, func(k string) []byte { return []byte(cm.Data[k]) })
	keys = keys[:0]
	for k := range cm.BinaryData {
		keys = append(keys, k)
	}
	write("b", keys, func(k string) []byte { return cm.BinaryData[k] })
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// Apply makes the ConfigMap desired.Name in desired.Namespace hold desired's data, labels and
// annotations, owned (controller reference) by owner. It writes nothing when the stored object
// already matches, creates it when missing and retries updates on conflicts.
func (a *Applier) Apply(ctx context.Context, desired *corev1.ConfigMap, owner client.Object) (Result, error) {
	want := desired.DeepCopy()
	if want.Labels == nil {
		want.Labels = map[string]string{}
	}
	want.Labels[ManagedByLabel] = a.ManagedBy
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Annotations[ContentHashAnnotation] = ContentHash(want)
	if err := controllerutil.SetControllerReference(owner, want, a.Scheme); err != nil {
		return "", err
	}

	result := Unchanged
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var have corev1.ConfigMap
		err := a.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
		if apierrors.IsNotFound(err) {
			if err := a.Client.Create(ctx, want.DeepCopy()); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(corev1.Resource("configmaps"), want.Name, err)
				}
				return err
			}
			result = Created
			return nil
		}
		if err != nil {
			return err
		}
		if err := a.checkOwnership(&have, owner); err != nil {
			return err
		}
		if upToDate(&have, want) {
			result = Unchanged
			return nil
		}
		merged := have.DeepCopy()
		merged.Data, merged.BinaryData = want.Data, want.BinaryData
		mergeStrings(&merged.Labels, want.Labels)
		mergeStrings(&merged.Annotations, want.Annotations)
		delete(merged.Annotations, digestAnnotation)
		merged.OwnerReferences = want.OwnerReferences
		if err := a.Client.Update(ctx, merged); err != nil {
			return err
		}
		result = Updated
		return nil
	})
	return result, err
}

// checkOwnership refuses to take over a ConfigMap that another object controls or that a user made.
func (a *Applier) checkOwnership(have *corev1.ConfigMap, owner client.Object) error {
	if ref := metav1.GetControllerOf(have); ref != nil {
		if ref.UID != owner.GetUID() {
			return &NotOwnedError{Name: have.Name, Owner: fmt.Sprintf("controlled by %s %s", ref.Kind, ref.Name)}
		}
		return nil
	}
	if have.Labels[ManagedByLabel] != a.ManagedBy {
		return &NotOwnedError{Name: have.Name, Owner: "no owner reference and no " + ManagedByLabel + "=" + a.ManagedBy + " label"}
	}
	return nil // ours, but orphaned (e.g. its owner was recreated): adopt it
}

func upToDate(have, want *corev1.ConfigMap) bool {
	if have.Annotations[ContentHashAnnotation] != want.Annotations[ContentHashAnnotation] ||
		observedHash(have) != want.Annotations[ContentHashAnnotation] {
		return false
	}
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	for k, v := range want.Annotations {
		if have.Annotations[k] != v {
			return false
		}
	}
	ref := metav1.GetControllerOf(have)
	return ref != nil && ref.UID == want.OwnerReferences[0].UID
}

func mergeStrings(dst *map[string]string, src map[string]string) {
	if *dst == nil {
		*dst = map[string]string{}
	}
	for k, v := range src {
		(*dst)[k] = v
	}
}
