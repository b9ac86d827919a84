package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"
)

// TestRoleFootprint measures the roles as the processes they are in a pod: RSS idle and under
// 1,000 requests/s, and the latency the proxies add. It runs the real binary in a network
// namespace of its own with proxy-init's rules installed; the identity provider and the
// destinations are doubles in this process, so that only the roles are measured.
//
//	KAGENTI_LOAD=1 go test ./tokenexchange/cmd/kagenti-authbridge -run TestRoleFootprint -v -timeout 20m
func TestRoleFootprint(t *testing.T) {
	if os.Getenv("KAGENTI_LOAD") == "" {
		t.Skip("load test: set KAGENTI_LOAD=1 (needs root)")
	}
	if os.Getenv(testbedEnv) != "load" {
		if os.Geteuid() != 0 {
			t.Skip("needs root: a network namespace, nftables, processes under the proxy UID")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRoleFootprint$", "-test.v", "-test.timeout=30m")
		cmd.Env = append(os.Environ(), testbedEnv+"=load")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		t.Logf("%s", out)
		require.NoError(t, err)
		return
	}
	footprint(t)
}

const (
	loadIP       = "10.88.0.1"
	upstreamPort = 8000 // redirected to the outbound proxy
	directPort   = 8001 // excluded: the baseline
	tokenPort    = 9000
	inboundPort  = 18080
	agentPort    = 18081
	rate         = 1000 // requests per second
	loadFor      = 10 * time.Second
)

func footprint(t *testing.T) {
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"link", "add", "kbr", "type", "bridge"},
		{"addr", "add", loadIP + "/24", "dev", "kbr"}, {"link", "set", "kbr", "up"}} {
		run(t, "ip", args...)
	}
	dir, err := os.MkdirTemp("/tmp", "kload-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	tb := &testbed{t: t, dir: dir}
	tb.self = filepath.Join(dir, "kagenti-authbridge")
	tags, err := os.ReadFile("../../../hack/go-build-tags") // the shipped binary's build tags
	require.NoError(t, err)
	out, err := exec.Command("go", "build", "-tags", strings.TrimSpace(string(tags)), "-trimpath", "-ldflags", "-s -w", "-o", tb.self, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)

	// The doubles: destinations, the identity provider's JWKS, token and registration endpoints.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k"}}, nil)
	require.NoError(t, err)
	issuer := fmt.Sprintf("http://%s:%d", loadIP, tokenPort)
	token := func(aud string) string {
		s, err := jwt.Signed(signer).Claims(map[string]any{"iss": issuer, "aud": aud, "sub": "user", "exp": time.Now().Add(time.Hour).Unix(), "scope": "agent:invoke"}).Serialize()
		require.NoError(t, err)
		return s
	}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	tb.serve(fmt.Sprintf("%s:%d", loadIP, upstreamPort), echo)
	tb.serve(fmt.Sprintf("%s:%d", loadIP, directPort), echo)
	tb.serve(fmt.Sprintf("127.0.0.1:%d", agentPort), echo)
	var exchanges atomic.Int64
	idp := http.NewServeMux()
	idp.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k", Algorithm: "ES256", Use: "sig"}}})
	})
	idp.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		exchanges.Add(1)
		_ = r.ParseForm()
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token(r.PostForm.Get("audience")), "token_type": "Bearer",
			"issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "expires_in": 3600})
	})
	idp.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"client_id":"c1","client_secret":"s1"}`)
	})
	tb.serve(fmt.Sprintf("%s:%d", loadIP, tokenPort), idp)

	cfgDir, shared := filepath.Join(dir, "config"), filepath.Join(dir, "shared")
	require.NoError(t, os.MkdirAll(cfgDir, 0o755))
	require.NoError(t, os.MkdirAll(shared, 0o770))
	require.NoError(t, os.Chown(shared, proxyUID, proxyUID))
	write(t, filepath.Join(cfgDir, "config.yaml"), fmt.Sprintf("outbound: {tokenExchange: {destinationRules: [{match: {host: 'api.example.com'}, target: {audience: api}}]}}\n"))
	env := []string{"POD_NAMESPACE=agents", "KAGENTI_WORKLOAD=w", "KAGENTI_SERVICE_ACCOUNT=w", "POD_NAME=w-0",
		"KAGENTI_TRUST_DOMAIN=cluster.local", "KAGENTI_SPIFFE_ENABLED=false", "KAGENTI_IDP_PROVIDER=oidc",
		"KAGENTI_OIDC_ISSUER=" + issuer, "KAGENTI_OIDC_TOKEN_URL=" + issuer + "/token", "KAGENTI_OIDC_JWKS_URL=" + issuer + "/keys",
		"KAGENTI_OIDC_REGISTRATION_URL=" + issuer + "/register", "KAGENTI_CLIENT_NAME_TEMPLATE={{.Namespace}}/{{.WorkloadName}}",
		"KAGENTI_INBOUND_PORT=" + strconv.Itoa(inboundPort), "KAGENTI_TARGET_PORT=" + strconv.Itoa(agentPort),
		"KAGENTI_OUTBOUND_PORT=15123", "KAGENTI_PROXY_UID=" + strconv.Itoa(proxyUID), "KAGENTI_OUTBOUND_PORTS_EXCLUDE=" + strconv.Itoa(directPort),
		"KAGENTI_DEFAULT_AUDIENCE=downstream",
		"PATH=" + os.Getenv("PATH")}
	common := []string{"--config-dir", cfgDir, "--shared-dir", shared}
	t.Logf("init: %s", runEnv(t, env, tb.self, append([]string{"init", "--helper-conf", ""}, common...)...))
	asProxy := func(args ...string) []string {
		return append([]string{"setpriv", fmt.Sprintf("--reuid=%d", proxyUID), fmt.Sprintf("--regid=%d", proxyUID), "--clear-groups", tb.self}, args...)
	}
	pids := map[string]int{}
	for role, port := range map[string]int{"register": 15124, "inbound": 15125, "outbound": 15126} {
		args := asProxy(append([]string{role, "--status-address", fmt.Sprintf("127.0.0.1:%d", port)}, common...)...)
		cmd := tb.startEnv(role, env, args...) // setpriv execs the role: same PID
		tb.eventually(role+" ready", func() error {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s", b)
			}
			return nil
		})
		pids[role] = cmd.Process.Pid
	}
	time.Sleep(3 * time.Second)
	idle := map[string]int{}
	for role, pid := range pids {
		idle[role] = procKiB(t, pid, "VmRSS")
	}

	user := token("spiffe://cluster.local/ns/agents/sa/w")
	report := []string{fmt.Sprintf("load average at start: %s", loadavg())}
	for role, kib := range idle {
		report = append(report, fmt.Sprintf("%-9s idle RSS %5.1f MiB", role, float64(kib)/1024))
	}
	drive := func(name, url, host string, tok func(int) string) []time.Duration {
		lat, achieved := load(t, url, host, tok)
		report = append(report, fmt.Sprintf("%-34s %5.0f req/s  p50 %7.3f ms  p99 %7.3f ms", name, achieved, ms(pct(lat, 50)), ms(pct(lat, 99))))
		return lat
	}
	direct := drive("direct (excluded port)", fmt.Sprintf("http://%s:%d/", loadIP, directPort), "api.example.com", func(int) string { return user })
	proxied := drive("outbound, cached token", fmt.Sprintf("http://%s:%d/", loadIP, upstreamPort), "api.example.com", func(int) string { return user })
	report = append(report, fmt.Sprintf("outbound added latency: p50 %.3f ms, p99 %.3f ms (%d exchanges for the whole run)",
		ms(pct(proxied, 50)-pct(direct, 50)), ms(pct(proxied, 99)-pct(direct, 99)), exchanges.Load()))
	agentDirect := drive("agent direct", fmt.Sprintf("http://127.0.0.1:%d/", agentPort), "agent", func(int) string { return user })
	inbound := drive("inbound, token validated", fmt.Sprintf("http://127.0.0.1:%d/", inboundPort), "agent", func(int) string { return user })
	report = append(report, fmt.Sprintf("inbound added latency: p50 %.3f ms, p99 %.3f ms",
		ms(pct(inbound, 50)-pct(agentDirect, 50)), ms(pct(inbound, 99)-pct(agentDirect, 99))))
	// Cache misses: a new subject token per request, sequential (the double answers at once).
	tokens := make([]string, 300)
	for i := range tokens {
		tokens[i] = token(fmt.Sprintf("user-%d", i))
	}
	var miss []time.Duration
	for i := range tokens {
		start := time.Now()
		if status, _ := doGet(fmt.Sprintf("http://%s:%d/", loadIP, upstreamPort), "api.example.com", tokens[i]); status != http.StatusOK {
			t.Fatalf("miss %d: status %d", i, status)
		}
		miss = append(miss, time.Since(start))
	}
	slices.Sort(miss)
	report = append(report, fmt.Sprintf("outbound, cache miss (sequential)  p50 %7.3f ms  p99 %7.3f ms", ms(pct(miss, 50)), ms(pct(miss, 99))))
	for role, pid := range pids {
		report = append(report, fmt.Sprintf("%-9s peak RSS %5.1f MiB (VmHWM)", role, float64(procKiB(t, pid, "VmHWM"))/1024))
	}
	report = append(report, fmt.Sprintf("load average at end: %s", loadavg()))
	t.Logf("role footprint:\n%s", strings.Join(report, "\n"))
}

// load sends rate requests/s for loadFor from 64 workers over keep-alive connections and returns
// the sorted latencies and the rate achieved.
func load(t *testing.T, url, host string, tok func(int) string) ([]time.Duration, float64) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: 10 * time.Second}
	n := int(rate * loadFor / time.Second)
	jobs := make(chan int, n)
	lat := make([]time.Duration, n)
	var failures atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Host = host
				req.Header.Set("Authorization", "Bearer "+tok(i))
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					failures.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(start)
				if resp.StatusCode != http.StatusOK {
					failures.Add(1)
				}
			}
		}()
	}
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / rate)); d > 0 {
			time.Sleep(d)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	require.Zero(t, failures.Load(), "failed requests to %s", url)
	slices.Sort(lat)
	return lat, float64(n) / elapsed.Seconds()
}

func pct(sorted []time.Duration, p int) time.Duration { return sorted[(len(sorted)-1)*p/100] }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// procKiB reads a "Vm…: N kB" line of /proc/pid/status.
func procKiB(t *testing.T, pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			v, err := strconv.Atoi(strings.Fields(rest)[0])
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("%s not in /proc/%d/status", field, pid)
	return 0
}
