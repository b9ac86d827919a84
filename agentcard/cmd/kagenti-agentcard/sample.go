package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/signature"
)

type sampleServer struct {
	listen                          []string
	kubeconfig, namespace, selector string
	port, parentPID                 int
	caCert, caKey, spiffeID         string
	cardPath                        string
	servers                         map[string]*http.Server
	handler                         http.Handler
}

func (o *sampleServer) run() error {
	if len(o.listen) == 0 && o.selector == "" {
		return fmt.Errorf("give --listen addresses or a pod --selector")
	}
	if o.cardPath == "" {
		return fmt.Errorf("give the --card to serve (the local cluster's is hack/local/weather-agent-card.json)")
	}
	raw, err := os.ReadFile(o.cardPath)
	if err != nil {
		return err
	}
	if o.caCert != "" {
		ca, err := devca.LoadCA(o.caCert, o.caKey)
		if err != nil {
			return err
		}
		svid, err := ca.NewSVID(o.spiffeID, devca.SVIDOptions{NotAfter: time.Now().Add(7 * 24 * time.Hour)})
		if err != nil {
			return err
		}
		if raw, err = signature.Sign(raw, signature.SignOptions{Key: svid.Key, Chain: svid.Chain}); err != nil {
			return err
		}
	}
	etag := fmt.Sprintf(`"%x"`, sha256.Sum256(raw))
	o.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" && r.URL.Path != "/.well-known/agent.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
	})
	o.servers = map[string]*http.Server{}
	defer func() {
		for _, s := range o.servers {
			_ = s.Close()
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, addr := range o.listen {
		if err := o.serve(addr); err != nil {
			return err
		}
	}
	var cs kubernetes.Interface
	if o.selector != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return err
		}
		if cs, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if o.parentPID > 0 && syscall.Kill(o.parentPID, 0) != nil {
			return nil
		}
		if cs != nil {
			o.syncPods(ctx, cs)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// syncPods serves on the IP of every running pod and stops serving for pods that are gone.
func (o *sampleServer) syncPods(ctx context.Context, cs kubernetes.Interface) {
	pods, err := cs.CoreV1().Pods(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: o.selector})
	if err != nil {
		fmt.Fprintln(os.Stderr, "listing pods:", err)
		return
	}
	want := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(o.port))
		want[addr] = true
		if _, ok := o.servers[addr]; !ok {
			if err := o.serve(addr); err != nil {
				fmt.Fprintf(os.Stderr, "serving for pod %s: %v\n", p.Name, err)
			}
		}
	}
	for addr, s := range o.servers {
		if !want[addr] && !slices.Contains(o.listen, addr) {
			_ = s.Close()
			delete(o.servers, addr)
		}
	}
}

func (o *sampleServer) serve(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: o.handler, ReadHeaderTimeout: 5 * time.Second}
	o.servers[addr] = srv
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintln(os.Stderr, "serving the sample card on", addr)
	return nil
}
