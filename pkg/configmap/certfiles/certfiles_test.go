package certfiles

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var testCfg *rest.Config

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		println("KUBEBUILDER_ASSETS is not set: run `make unit` (it builds the API server into bin/ and points here)")
		os.Exit(1)
	}
	env := &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := env.Start()
	if err != nil {
		println("starting envtest:", err.Error())
		os.Exit(1)
	}
	testCfg = cfg
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// waitFile waits until path holds want ("" : does not exist).
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if (want == "" && os.IsNotExist(err)) || (err == nil && string(b) == want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, %v; want %q", path, b, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSyncerWritesTheSecretsServingFilesAndFollowsRotation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(testCfg)
	// A namespace of its own: the test runs again (-count) on the same API server.
	nsObj, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certfiles-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	dir := t.TempDir()
	s := &Syncer{Config: testCfg, Namespace: ns, Name: "webhook-cert", Dir: dir, Log: logr.Discard()}
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()

	// Another Secret in the namespace is not ours.
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Data: map[string][]byte{"tls.crt": []byte("other"), "tls.key": []byte("other")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The rotator creates its Secret empty, then fills it.
	sec, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "webhook-cert"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{"tls.crt": []byte("cert 1"), "tls.key": []byte("key 1"), "ca.crt": []byte("ca"), "ca.key": []byte("ca key")}
	if sec, err = cs.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "tls.crt"), "cert 1")
	waitFile(t, filepath.Join(dir, "tls.key"), "key 1")
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); !os.IsNotExist(err) {
		t.Errorf("the CA's private key was written to disk (%v)", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "tls.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("tls.key mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}

	sec.Data["tls.crt"], sec.Data["tls.key"] = []byte("cert 2"), []byte("key 2")
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "tls.crt"), "cert 2")
	waitFile(t, filepath.Join(dir, "tls.key"), "key 2")
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want tls.crt and tls.key only (no temporary files left)", len(entries))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWriteWaitsForEveryKey(t *testing.T) {
	s := &Syncer{Dir: t.TempDir()}
	wrote, err := s.Write(map[string][]byte{"tls.crt": []byte("cert")})
	if wrote || err != nil {
		t.Fatalf("a Secret without tls.key: wrote %v, %v; want nothing written", wrote, err)
	}
	if wrote, err = s.Write(map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}); !wrote || err != nil {
		t.Fatalf("wrote %v, %v", wrote, err)
	}
	if wrote, err = s.Write(map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}); wrote || err != nil {
		t.Fatalf("unchanged content rewritten: %v, %v", wrote, err)
	}
}

func TestWriteIntoAMissingDirectoryIsAnError(t *testing.T) {
	s := &Syncer{Dir: filepath.Join(t.TempDir(), "missing")}
	if _, err := s.Write(map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}); err == nil {
		t.Fatal("no error writing into a directory that does not exist")
	}
}
