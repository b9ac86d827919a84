// Command gitserver serves the bare git repositories under a directory over git's smart HTTP
// protocol, by running git's own http-backend as a CGI program: clone, fetch (shallow included),
// never push. The kind suite runs it in the cluster as the source an AgentBuild clones
// (hack/kind/tekton.sh, docs/kind.md).
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/cgi"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", ":8080", "address to listen on")
	root := flag.String("root", "/srv/git", "directory holding the bare repositories (<name>.git)")
	backend := flag.String("backend", "/usr/lib/git-core/git-http-backend", "git's http-backend program")
	flag.Parse()
	if _, err := os.Stat(*backend); err != nil {
		log.Fatalf("gitserver: %v (git's http-backend is part of the git package)", err)
	}
	srv := &http.Server{Addr: *addr, Handler: handler(*backend, *root), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("gitserver: serving %s on %s", *root, *addr)
	log.Fatal(srv.ListenAndServe())
}

// handler runs git-http-backend for fetches and clones, and refuses pushes: the repositories are
// the suite's fixtures.
func handler(backend, root string) http.Handler {
	cgiHandler := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack" {
			http.Error(w, "gitserver: push is not served", http.StatusForbidden)
			return
		}
		log.Printf("%s %s", r.Method, r.URL.Path)
		cgiHandler.ServeHTTP(w, r)
	})
}

func init() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: gitserver [-addr :8080] [-root /srv/git]\n")
		flag.PrintDefaults()
	}
}
