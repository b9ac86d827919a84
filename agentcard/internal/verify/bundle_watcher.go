package verify

import (
	"context"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

// The trust bundle is the only ConfigMap agentcard reads: a Role in the install namespace for that
// one name (list and watch by name are authorized against resourceNames through the
// metadata.name field selector the informer sends). A bundle elsewhere needs its own Role.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch,namespace=kagenti-system,resourceNames=spire-bundle

// BundleWatcher follows the one trust-bundle ConfigMap (an informer restricted to its name, so no
// other ConfigMap is cached) and re-queues every AgentCard when the bundle changes.
type BundleWatcher struct {
	core      corev1client.CoreV1Interface
	reader    client.Reader
	key       types.NamespacedName
	dataKey   string
	td        spiffeid.TrustDomain
	store     *TrustStore
	rotations chan<- event.TypedGenericEvent[client.Object]
}

// NewBundleWatcher validates the trust domain and builds the watcher: it watches the ConfigMap key
// with cfg and lists the AgentCards to re-queue with reader.
func NewBundleWatcher(cfg *rest.Config, reader client.Reader, key types.NamespacedName, dataKey, trustDomain string, store *TrustStore, rotations chan<- event.TypedGenericEvent[client.Object]) (*BundleWatcher, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return nil, fmt.Errorf("--trust-domain %q: %w", trustDomain, err)
	}
	// The core/v1 client alone: a clientset or a shared informer factory would link every API
	// group's typed client, informer and lister into the binary (about 12 MB).
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &BundleWatcher{core: core, reader: reader, key: key, dataKey: dataKey, td: td, store: store, rotations: rotations}, nil
}

// NeedLeaderElection: every replica keeps its bundle current (the discovery API needs no bundle,
// but a standby must be ready to verify when it takes over).
func (w *BundleWatcher) NeedLeaderElection() bool { return false }

// Start runs the informer until ctx ends.
func (w *BundleWatcher) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("trust-bundle")
	lw := cache.NewFilteredListWatchFromClient(w.core.RESTClient(), "configmaps", w.key.Namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.key.Name).String()
	})
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	load := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			w.set(ctx, nil, fmt.Errorf("trust bundle ConfigMap %s deleted", w.key))
			return
		}
		data := cm.Data[w.dataKey]
		if data == "" && cm.BinaryData[w.dataKey] != nil {
			data = string(cm.BinaryData[w.dataKey])
		}
		if data == "" {
			w.set(ctx, nil, fmt.Errorf("trust bundle ConfigMap %s has no key %q", w.key, w.dataKey))
			return
		}
		b, err := signature.ParseBundle(w.td, []byte(data))
		if err != nil {
			logger.Error(err, "trust bundle rejected; keeping the previous one", "configmap", w.key.String())
			return
		}
		w.set(ctx, b, nil)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    load,
		UpdateFunc: func(_, n any) { load(n) },
		DeleteFunc: func(any) { load(nil) },
	})
	if err != nil {
		return err
	}
	inf.RunWithContext(ctx)
	return nil
}

func (w *BundleWatcher) set(ctx context.Context, b *signature.Bundle, err error) {
	old := w.store.Hash()
	w.store.Set(b, err)
	if w.store.Hash() == old {
		return
	}
	log.FromContext(ctx).Info("trust bundle changed; re-verifying every AgentCard", "configmap", w.key.String(), "loaded", b != nil)
	// Queued asynchronously: the controller may not run yet (leader election) and must not block the informer.
	go w.requeueAll(ctx)
}

func (w *BundleWatcher) requeueAll(ctx context.Context) {
	var list v1alpha1.AgentCardList
	if err := w.reader.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		select {
		case w.rotations <- event.TypedGenericEvent[client.Object]{Object: &list.Items[i]}:
		case <-ctx.Done():
			return
		}
	}
}
