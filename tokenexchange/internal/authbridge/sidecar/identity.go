package sidecar

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kagenti/platform/pkg/configmap/identity"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// IdentityLookup returns a lookup of the identity variables (authconfig.EnvNames) that reads the
// process environment first, then the identity directory the injector mounts: a file named after
// the variable (the downward API's POD_NAME, POD_NAMESPACE), else a NAME=VALUE line of
// authconfig.IdentityDefaultsFile (the injector's defaults for this workload), else the built-in
// default (package identity, which the injector's configuration defaults to: the injector writes
// only the lines that differ from it, and "NAME=" where its configuration unsets one). One volume
// replaces a score of variables in every container of the pod (issue 15: a lean injection). A
// missing directory, or dir "", leaves the environment and the built-in defaults. The files are
// read once: the defaults only change with a new pod template, hence a new pod.
func IdentityLookup(dir string, env func(string) (string, bool)) (func(string) (string, bool), error) {
	files := map[string]string{}
	var defaults map[string]string
	if dir != "" {
		known := map[string]bool{}
		for _, n := range authconfig.EnvNames() {
			known[n] = true
			b, err := os.ReadFile(filepath.Join(dir, n))
			switch {
			case errors.Is(err, fs.ErrNotExist):
			case err != nil:
				return nil, err
			default:
				files[n] = strings.TrimSpace(string(b))
			}
		}
		path := filepath.Join(dir, authconfig.IdentityDefaultsFile)
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if defaults, err = parseDefaults(b, known); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return func(name string) (string, bool) {
		if v, ok := env(name); ok && v != "" {
			return v, true
		}
		if v, ok := files[name]; ok {
			return v, true
		}
		if v, ok := defaults[name]; ok {
			return v, true
		}
		return identity.BuiltIn(name)
	}, nil
}

// parseDefaults reads NAME=VALUE lines (blank lines and # comments skipped); an unknown name is
// an error, so a misspelt default is not silently dropped.
func parseDefaults(b []byte, known map[string]bool) (map[string]string, error) {
	out := map[string]string{}
	s := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not NAME=VALUE", n, line)
		}
		if !known[name] {
			return nil, fmt.Errorf("line %d: %s is not an identity variable", n, name)
		}
		out[name] = value
	}
	return out, s.Err()
}
