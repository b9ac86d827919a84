// Package metricsauth serves a controller's metrics endpoint only to callers the API server
// authenticates (TokenReview of their bearer token) and authorizes for the request's non-resource
// URL and verb (SubjectAccessReview), as controller-runtime's
// filters.WithAuthenticationAndAuthorization does.
//
// Why not that filter: it builds k8s.io/apiserver's delegating authenticator and authorizer, which
// link about 260 more packages (CEL, gRPC, OpenTelemetry, konnectivity) into every binary: 20 MiB
// more binary and about 10 MiB more resident memory per controller, for two API calls and a cache.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The cache lifetimes are those of the API server's delegating authenticator and authorizer (and
// so of controller-runtime's filter): a revoked token or binding takes effect within them.
const (
	tokenTTL      = time.Minute
	allowTTL      = 5 * time.Minute
	denyTTL       = 30 * time.Second
	reviewTimeout = 10 * time.Second
	// cacheSize bounds each cache: scrapers are few, but anyone can send tokens.
	cacheSize = 1024
)

// retryBackoff retries a review the API server failed to answer (not a negative answer).
var retryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Provider is a metricsserver.Options.FilterProvider: it reviews with the controller's own
// identity, which needs create on tokenreviews and subjectaccessreviews.
func Provider(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	g := &guard{
		tokens:    authn.TokenReviews(),
		access:    authz.SubjectAccessReviews(),
		users:     cache.NewLRUExpireCache(cacheSize),
		decisions: cache.NewLRUExpireCache(cacheSize),
	}
	return g.filter, nil
}

type guard struct {
	tokens    authenticationclient.TokenReviewInterface
	access    authorizationclient.SubjectAccessReviewInterface
	users     *cache.LRUExpireCache // sha256 of a token → *authenticationv1.UserInfo, nil when rejected
	decisions *cache.LRUExpireCache // user, verb and path → bool
}

func (g *guard) filter(log logr.Logger, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, err := g.authenticate(req.Context(), req)
		if err != nil {
			log.Error(err, "Authenticating a metrics request")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := g.authorize(req.Context(), user, strings.ToLower(req.Method), req.URL.Path)
		if err != nil {
			log.Error(err, "Authorizing a metrics request", "user", user.Username)
			http.Error(w, fmt.Sprintf("Authorization for user %s failed", user.Username), http.StatusInternalServerError)
			return
		}
		if !allowed {
			http.Error(w, fmt.Sprintf("Authorization denied for user %s", user.Username), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	}), nil
}

// authenticate returns the user the request's bearer token belongs to, or nil when there is no
// token or the API server rejects it.
func (g *guard) authenticate(ctx context.Context, req *http.Request) (*authenticationv1.UserInfo, error) {
	scheme, token, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, nil
	}
	key := sha256.Sum256([]byte(token))
	if v, ok := g.users.Get(key); ok {
		return v.(*authenticationv1.UserInfo), nil
	}
	var review *authenticationv1.TokenReview
	err := retry.OnError(retryBackoff, retriable(ctx), func() error {
		rctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		var err error
		review, err = g.tokens.Create(rctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	var user *authenticationv1.UserInfo
	if review.Status.Authenticated {
		user = &review.Status.User
	}
	g.users.Add(key, user, tokenTTL)
	return user, nil
}

// authorize asks the API server whether user may use verb on the non-resource URL path.
func (g *guard) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, error) {
	key := decisionKey(user, verb, path)
	if v, ok := g.decisions.Get(key); ok {
		return v.(bool), nil
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	var review *authorizationv1.SubjectAccessReview
	err := retry.OnError(retryBackoff, retriable(ctx), func() error {
		rctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		var err error
		review, err = g.access.Create(rctx, sar, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	allowed := review.Status.Allowed && !review.Status.Denied
	ttl := denyTTL
	if allowed {
		ttl = allowTTL
	}
	g.decisions.Add(key, allowed, ttl)
	return allowed, nil
}

// retriable retries every failure of the API call until the request itself is gone.
func retriable(ctx context.Context) func(error) bool {
	return func(err error) bool {
		return ctx.Err() == nil && !errors.Is(err, context.Canceled)
	}
}

// decisionKey identifies a SubjectAccessReview: everything the API server decides on.
func decisionKey(user *authenticationv1.UserInfo, verb, path string) string {
	var b strings.Builder
	for _, s := range []string{verb, path, user.Username, user.UID} {
		fmt.Fprintf(&b, "%q ", s)
	}
	fmt.Fprintf(&b, "%q ", user.Groups)
	keys := make([]string, 0, len(user.Extra))
	for k := range user.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%q=%q ", k, user.Extra[k])
	}
	return b.String()
}
