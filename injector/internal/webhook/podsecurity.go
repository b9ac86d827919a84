package webhook

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/pod-security-admission/api"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	"github.com/kagenti/platform/pkg/configmap/podsecurity"
)

// The injector watches Namespaces for their Pod Security labels, to warn at admission when a
// namespace enforces a level that forbids what is injected (docs/injector.md#pod-security).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch

// PodSecurityLevels says which Pod Security level a namespace enforces; false when none beyond
// privileged (or not known yet). It is read on the admission path and must not block.
type PodSecurityLevels interface {
	Enforced(namespace string) (api.LevelVersion, bool)
}

// NamespaceLevels is the PodSecurityLevels of a watch of Namespaces (Watch): a map read under a
// lock, so that the admission path makes no API call. Until the watch has listed the namespaces it
// knows none, and the injector does not warn.
type NamespaceLevels struct {
	mu sync.RWMutex
	// levels holds the namespaces that enforce more than privileged.
	levels map[string]api.LevelVersion
	// modes holds the namespaces labelled kagenti.io/interception, with the label's value.
	modes map[string]string
}

// NamespaceInterception says which interception mode a namespace's label kagenti.io/interception
// chooses for its workloads without a label of their own (the value as written, unchecked); false
// when the namespace has none (or is not known yet).
type NamespaceInterception interface {
	Interception(namespace string) (string, bool)
}

var _ NamespaceInterception = (*NamespaceLevels)(nil)

// Interception implements NamespaceInterception.
func (l *NamespaceLevels) Interception(namespace string) (string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	mode, ok := l.modes[namespace]
	return mode, ok
}

var _ PodSecurityLevels = (*NamespaceLevels)(nil)

// Enforced implements PodSecurityLevels.
func (l *NamespaceLevels) Enforced(namespace string) (api.LevelVersion, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	lv, ok := l.levels[namespace]
	return lv, ok
}

// Watch keeps l current from the informer of Namespaces of informers (the manager's cache, which
// starts it); it does not wait for the first list.
func (l *NamespaceLevels) Watch(ctx context.Context, informers cache.Informers) error {
	inf, err := informers.GetInformer(ctx, &corev1.Namespace{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watching namespaces for their Pod Security labels: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    l.set,
		UpdateFunc: func(_, obj any) { l.set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ns, ok := obj.(*corev1.Namespace); ok {
				l.mu.Lock()
				delete(l.levels, ns.Name)
				delete(l.modes, ns.Name)
				l.mu.Unlock()
			}
		},
	})
	return err
}

func (l *NamespaceLevels) set(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	lv, enforced := podsecurity.Enforced(ns.Labels)
	l.mu.Lock()
	defer l.mu.Unlock()
	if mode, ok := ns.Labels[inject.LabelInterception]; ok {
		if l.modes == nil {
			l.modes = map[string]string{}
		}
		l.modes[ns.Name] = mode
	} else {
		delete(l.modes, ns.Name)
	}
	if !enforced {
		delete(l.levels, ns.Name)
		return
	}
	if l.levels == nil {
		l.levels = map[string]api.LevelVersion{}
	}
	l.levels[ns.Name] = lv
}

// TrimNamespace is the cache transform for Namespaces: only the name, the Pod Security labels and
// kagenti.io/interception are read, so only they are kept.
func TrimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	out := &corev1.Namespace{}
	out.Name, out.ResourceVersion = ns.Name, ns.ResourceVersion
	for k, v := range ns.Labels {
		if k == podsecurity.EnforceLabel || k == podsecurity.EnforceVersionLabel || k == inject.LabelInterception {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	return out, nil
}

// podSecurityWarning is the admission warning when namespace enforces a Pod Security level that
// forbids the parts injected into out (as its status annotation records them), "" otherwise. The workload itself is admitted (Pod Security
// Admission checks pods, and only warns on workloads), so without it the user sees a Deployment with
// no pods and an event on its ReplicaSet.
func (h *Handler) podSecurityWarning(namespace, kind, name string, out *corev1.PodTemplateSpec) string {
	if h.PodSecurity == nil || out == nil {
		return ""
	}
	lv, ok := h.PodSecurity.Enforced(namespace)
	if !ok {
		return ""
	}
	reasons := podsecurity.Forbidden(lv, out)
	if len(reasons) == 0 {
		return ""
	}
	return fmt.Sprintf("kagenti-injector: namespace %q enforces Pod Security %q, which forbids what is injected into %s %q: %s; "+
		"the %s is admitted, but the API server will refuse to create its pods. Label the namespace %s=privileged "+
		"(the injection's proxy-init needs NET_ADMIN), label the %s %s=%s (proxy mode: no capability), or do not inject it here (docs/injector.md#pod-security)",
		namespace, lv.String(), kind, name, strings.Join(reasons, ", "), kind, podsecurity.EnforceLabel, kind, inject.LabelInterception, config.InterceptionProxy)
}
