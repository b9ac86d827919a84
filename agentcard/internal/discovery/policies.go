package discovery

import (
	"context"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/authz"
	"github.com/kagenti/platform/pkg/configmap/contract"
)

// The rights to list and watch ConfigMaps are ClusterRole kagenti-agentcard-policyreader's
// (internal/rbac/policyreader), bound only with --discovery-policies.

// PolicySource gives the compiled authorization policy of a workload (nil: it has no
// {workload}-token-exchange ConfigMap, so no TokenExchange configures it).
// Until Synced, no answer is known.
type PolicySource interface {
	Synced() bool
	Policy(namespace, workload string) *authz.WorkloadPolicy
}

// Policies watches the ConfigMaps tokenexchange writes ({workload}-token-exchange, selected by
// their component label) and keeps of each only its compiled policy: a transform replaces the
// ConfigMap, as it arrives, by its name and authz.ParseWorkloadPolicy of its config.yaml, so every
// version is parsed and compiled once and no ConfigMap's bytes stay in memory.
type Policies struct {
	informer toolscache.SharedIndexInformer
}

// policyEntry is what the informer keeps of a ConfigMap.
type policyEntry struct {
	metav1.ObjectMeta // name, namespace and resourceVersion only
	policy            *authz.WorkloadPolicy
}

// NewPolicies builds the watch; Start runs it.
func NewPolicies(cs kubernetes.Interface) *Policies {
	selector := contract.ComponentLabel + "=" + contract.ComponentTokenExchange
	lw := toolscache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	inf := toolscache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	_ = inf.SetTransform(compilePolicy) // fails only once the informer runs
	return &Policies{informer: inf}
}

// compilePolicy is the informer's transform: a ConfigMap becomes its compiled policy.
func compilePolicy(o any) (any, error) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return o, nil // a tombstone: its object was transformed when it was added
	}
	return &policyEntry{
		ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name, ResourceVersion: cm.ResourceVersion},
		policy:     authz.ParseWorkloadPolicy([]byte(cm.Data[contract.TokenExchangeConfigFile])),
	}, nil
}

// Start runs the watch until ctx ends (a manager Runnable).
func (p *Policies) Start(ctx context.Context) error {
	p.informer.Run(ctx.Done())
	return nil
}

// NeedLeaderElection: every replica serves the API.
func (p *Policies) NeedLeaderElection() bool { return false }

// Synced reports whether the first list is in. The API does not wait for it (it serves the
// cards without it), and answers unknown until then.
func (p *Policies) Synced() bool { return p.informer.HasSynced() }

// Policy implements PolicySource.
func (p *Policies) Policy(namespace, workload string) *authz.WorkloadPolicy {
	o, ok, err := p.informer.GetStore().GetByKey(namespace + "/" + configmap.TokenExchangeName(workload))
	if err != nil || !ok {
		return nil
	}
	if e, ok := o.(*policyEntry); ok {
		return e.policy
	}
	return nil
}

// spiffeIDOf maps the user a TokenReview names to the SPIFFE ID its pods get under the
// platform's convention (spiffe://<trust domain>/ns/<namespace>/sa/<service account>, as SPIRE's
// Kubernetes workload registration and agentcard's identity binding have it). Only a
// ServiceAccount has one.
func spiffeIDOf(user, trustDomain string) (string, error) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	ns, sa, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || sa == "" || strings.Contains(sa, ":") {
		return "", fmt.Errorf("the requester %q is not a ServiceAccount, so it has no workload SPIFFE ID", user)
	}
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return "", fmt.Errorf("trust domain %q: %w", trustDomain, err)
	}
	id, err := spiffeid.FromSegments(td, "ns", ns, "sa", sa)
	if err != nil {
		return "", fmt.Errorf("no SPIFFE ID for %q: %w", user, err)
	}
	return id.String(), nil
}
