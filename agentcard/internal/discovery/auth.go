package discovery

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Access is what a caller asks to do: verb (list/get) on agentcards in namespace ("" = all).
type Access struct {
	Verb, Namespace, Name string
}

// Authorizer decides whether the bearer of a token may do something.
type Authorizer interface {
	// Authorize returns the user name, whether access is allowed, and an error when the API server
	// could not be asked. An invalid token is (user "", allowed false, nil).
	Authorize(ctx context.Context, token string, a Access) (string, bool, error)
}

// KubeAuthorizer delegates to the API server: TokenReview, then SubjectAccessReview. Decisions are
// cached for TTL so a busy client costs two API calls per TTL, not per request.
type KubeAuthorizer struct {
	Client kubernetes.Interface
	TTL    time.Duration

	mu    sync.Mutex
	cache map[string]decision
}

type decision struct {
	user    string
	allowed bool
	expires time.Time
}

// Authorize implements Authorizer.
func (k *KubeAuthorizer) Authorize(ctx context.Context, token string, a Access) (string, bool, error) {
	key := fmt.Sprintf("%x|%s|%s|%s", sha256.Sum256([]byte(token)), a.Verb, a.Namespace, a.Name)
	k.mu.Lock()
	if d, ok := k.cache[key]; ok && time.Now().Before(d.expires) {
		k.mu.Unlock()
		return d.user, d.allowed, nil
	}
	k.mu.Unlock()

	tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return "", false, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		k.remember(key, decision{})
		return "", false, nil
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for kk, v := range u.Extra {
		extra[kk] = authzv1.ExtraValue(v)
	}
	sar, err := k.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: a.Verb, Group: "kagenti.io", Resource: "agentcards", Namespace: a.Namespace, Name: a.Name},
	}}, metav1.CreateOptions{})
	if err != nil {
		return u.Username, false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	d := decision{user: u.Username, allowed: sar.Status.Allowed}
	k.remember(key, d)
	return d.user, d.allowed, nil
}

func (k *KubeAuthorizer) remember(key string, d decision) {
	ttl := k.TTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	d.expires = time.Now().Add(ttl)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cache == nil || len(k.cache) > 10000 {
		k.cache = map[string]decision{}
	}
	k.cache[key] = d
}
