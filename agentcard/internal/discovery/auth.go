package discovery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Access is what a caller asks to do: verb (list/get) on agentcards in namespace ("" = all).
type Access struct {
	Verb, Namespace, Name string
	// Subresource of agentcards ("" for the cards themselves; GraphSubresource).
	Subresource string
}

// Authorizer decides whether the bearer of a token may do something.
type Authorizer interface {
	// Authorize returns the user name, whether access is allowed, and an error when the API server
	// could not be asked. An invalid token is (user "", allowed false, nil).
	Authorize(ctx context.Context, token string, a Access) (string, bool, error)
}

// Defaults of KubeAuthorizer.
const (
	DefaultAuthCacheTTL         = 30 * time.Second
	DefaultAuthNegativeCacheTTL = 5 * time.Second
	DefaultAuthCacheEntries     = 4096
	// reviewTimeout bounds one TokenReview or SubjectAccessReview; it is shared by every request
	// waiting for the same answer, so it does not follow any one request's context.
	reviewTimeout = 10 * time.Second
)

// KubeAuthorizer delegates to the API server: a TokenReview authenticates the token, a
// SubjectAccessReview authorizes the access. Answers are remembered in two bounded LRU caches
// keyed by the SHA-256 of the token (the token itself is never stored): a valid token and an
// allowed access for TTL, an invalid token and a denied access for NegativeTTL, and never past the
// token's own expiry. Concurrent requests with the same token wait for one review instead of
// sending one each. The API server is still asked once per distinct token: the per-client rate
// limit (ClientLimiter) is what bounds a client sending many different tokens.
type KubeAuthorizer struct {
	Client kubernetes.Interface
	// Audiences, when set, go into the TokenReview's spec.audiences: only tokens issued for one of
	// them are valid, and the review's status.audiences must name one. Empty accepts tokens for the
	// API server's own audiences.
	Audiences []string
	// TTL is how long a valid token and an allowed access are remembered (DefaultAuthCacheTTL
	// when 0), NegativeTTL how long an invalid token and a denied access are
	// (DefaultAuthNegativeCacheTTL when 0). Entries never outlive the token's expiry.
	TTL, NegativeTTL time.Duration
	// MaxEntries bounds each cache (DefaultAuthCacheEntries when 0).
	MaxEntries int
	// Clock is for tests; nil is the wall clock.
	Clock cache.Clock

	once      sync.Once
	tokens    *cache.LRUExpireCache // token hash → identity
	decisions *cache.LRUExpireCache // token hash + access → bool
	flight    singleflight.Group
}

// identity is the cached outcome of a TokenReview.
type identity struct {
	authenticated bool
	user          authnv1.UserInfo
	// expires is when the token expires (zero when unknown).
	expires time.Time
}

func (k *KubeAuthorizer) init() {
	k.once.Do(func() {
		if k.TTL <= 0 {
			k.TTL = DefaultAuthCacheTTL
		}
		if k.NegativeTTL <= 0 {
			k.NegativeTTL = DefaultAuthNegativeCacheTTL
		}
		if k.MaxEntries <= 0 {
			k.MaxEntries = DefaultAuthCacheEntries
		}
		if k.Clock == nil {
			k.Clock = wallClock{}
		}
		k.tokens = cache.NewLRUExpireCacheWithClock(k.MaxEntries, k.Clock)
		k.decisions = cache.NewLRUExpireCacheWithClock(k.MaxEntries, k.Clock)
	})
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Authorize implements Authorizer.
func (k *KubeAuthorizer) Authorize(ctx context.Context, token string, a Access) (string, bool, error) {
	k.init()
	sum := sha256.Sum256([]byte(token))
	tokenKey := hex.EncodeToString(sum[:])
	id, err := k.authenticate(ctx, tokenKey, token)
	if err != nil || !id.authenticated {
		return "", false, err
	}
	allowed, err := k.authorize(ctx, tokenKey, id, a)
	return id.user.Username, allowed, err
}

func (k *KubeAuthorizer) authenticate(ctx context.Context, key, token string) (identity, error) {
	if v, ok := k.tokens.Get(key); ok {
		return v.(identity), nil
	}
	v, err := k.shared(ctx, "token/"+key, func() (any, error) {
		if v, ok := k.tokens.Get(key); ok { // answered while this caller queued
			return v.(identity), nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		observeReview("TokenReview")
		tr, err := k.Client.AuthenticationV1().TokenReviews().Create(rctx, &authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: token, Audiences: k.Audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			return identity{}, fmt.Errorf("TokenReview: %w", err)
		}
		id := identity{authenticated: tr.Status.Authenticated && k.audienceAccepted(tr.Status.Audiences), user: tr.Status.User}
		if !id.authenticated {
			k.tokens.Add(key, identity{}, k.NegativeTTL)
			return identity{}, nil
		}
		id.expires = tokenExpiry(token)
		if ttl := k.ttl(k.TTL, id.expires); ttl > 0 {
			k.tokens.Add(key, id, ttl)
		}
		return id, nil
	})
	if err != nil {
		return identity{}, err
	}
	return v.(identity), nil
}

// audienceAccepted is the check the TokenReview API asks of its callers: with audiences
// requested, the token must be valid for at least one of them.
func (k *KubeAuthorizer) audienceAccepted(got []string) bool {
	if len(k.Audiences) == 0 {
		return true
	}
	for _, a := range got {
		if slices.Contains(k.Audiences, a) {
			return true
		}
	}
	return false
}

func (k *KubeAuthorizer) authorize(ctx context.Context, tokenKey string, id identity, a Access) (bool, error) {
	key := tokenKey + "/" + a.Verb + "/" + a.Subresource + "/" + a.Namespace + "/" + a.Name
	if v, ok := k.decisions.Get(key); ok {
		return v.(bool), nil
	}
	v, err := k.shared(ctx, "access/"+key, func() (any, error) {
		if v, ok := k.decisions.Get(key); ok {
			return v.(bool), nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		u := id.user
		extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
		for kk, v := range u.Extra {
			extra[kk] = authzv1.ExtraValue(v)
		}
		observeReview("SubjectAccessReview")
		sar, err := k.Client.AuthorizationV1().SubjectAccessReviews().Create(rctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: a.Verb, Group: "kagenti.io", Resource: "agentcards", Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("SubjectAccessReview: %w", err)
		}
		ttl := k.NegativeTTL
		if sar.Status.Allowed {
			ttl = k.TTL
		}
		if ttl = k.ttl(ttl, id.expires); ttl > 0 {
			k.decisions.Add(key, sar.Status.Allowed, ttl)
		}
		return sar.Status.Allowed, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// shared runs review once for all callers asking for key at the same time; a caller whose request
// ends stops waiting, the review goes on for the others.
func (k *KubeAuthorizer) shared(ctx context.Context, key string, review func() (any, error)) (any, error) {
	select {
	case r := <-k.flight.DoChan(key, review):
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ttl caps ttl at the time left until expires (when known).
func (k *KubeAuthorizer) ttl(ttl time.Duration, expires time.Time) time.Duration {
	if expires.IsZero() {
		return ttl
	}
	return min(ttl, expires.Sub(k.Clock.Now()))
}

// tokenExpiry reads the exp claim of a JWT (service-account and OIDC tokens are JWTs) without
// verifying it: the TokenReview has just done that. Zero when the token is not a JWT or has no exp.
func tokenExpiry(token string) time.Time {
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{
		jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
		jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
	})
	if err != nil {
		return time.Time{}
	}
	var claims jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&claims); err != nil || claims.Expiry == nil {
		return time.Time{}
	}
	return claims.Expiry.Time()
}
