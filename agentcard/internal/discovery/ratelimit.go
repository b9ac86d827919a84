package discovery

import (
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// DefaultMaxClients bounds how many client addresses a ClientLimiter remembers.
const DefaultMaxClients = 10000

// ClientLimiter gives each client address its own token bucket: rate requests per second with
// bursts of burst. It remembers at most maxClients addresses, forgetting the least recently seen
// first (a forgotten client starts again with a full bucket, which is where an idle one is anyway).
type ClientLimiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	clients *lru.Cache // address → *rate.Limiter
}

// NewClientLimiter returns a limiter of perSecond requests per client with bursts of burst.
func NewClientLimiter(perSecond float64, burst, maxClients int) *ClientLimiter {
	if maxClients <= 0 {
		maxClients = DefaultMaxClients
	}
	return &ClientLimiter{rate: rate.Limit(perSecond), burst: max(burst, 1), now: time.Now, clients: lru.New(maxClients)}
}

// Allow takes one request from client's bucket; when it is empty it returns false and how long
// until the next request would be allowed.
func (l *ClientLimiter) Allow(client string) (bool, time.Duration) {
	now := l.now()
	l.mu.Lock()
	var lim *rate.Limiter
	if v, ok := l.clients.Get(client); ok {
		lim = v.(*rate.Limiter)
	} else {
		lim = rate.NewLimiter(l.rate, l.burst)
		l.clients.Add(client, lim)
	}
	l.mu.Unlock()
	if lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / float64(l.rate) * float64(time.Second))
}

// clientAddress is the connection's source IP, the address rate limits apply to. Forwarding
// headers are not trusted (any client can set them), but for ForwardedForHeader on a request from
// another replica of the API (Server.rateLimitKey).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// retryAfterSeconds is the Retry-After value for a wait of d: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
