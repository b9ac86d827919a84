// Package manifest reads Kubernetes objects from files, directories and stdin the way kubectl -f
// does: YAML (multi-document) or JSON, and List objects expanded into their items.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Document is one object read from an input.
type Document struct {
	// File is the path it was read from, "-" for stdin.
	File string
	// Index is the document's position in File, from 1 (YAML documents separated by ---, or JSON
	// values one after another).
	Index int
	// Item is the position inside a List document, from 1; 0 when the document is not a List.
	Item int
	// Object is the decoded object.
	Object *unstructured.Unstructured
}

// Where names the document for messages: "agents.yaml, document 2" or "old.yaml, document 1, item 3".
func (d Document) Where() string {
	file := d.File
	if file == "-" {
		file = "stdin"
	}
	if d.Item > 0 {
		return fmt.Sprintf("%s, document %d, item %d", file, d.Index, d.Item)
	}
	return fmt.Sprintf("%s, document %d", file, d.Index)
}

// extensions kubectl reads from a directory.
var extensions = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// Read reads every document of the given paths: files, directories (their .yaml, .yml and .json
// files; subdirectories too with recursive) and "-" for stdin.
func Read(paths []string, recursive bool, stdin io.Reader) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		if p == "-" {
			got, err := decode("-", stdin)
			if err != nil {
				return nil, err
			}
			docs = append(docs, got...)
			continue
		}
		files, err := expand(p, recursive)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			got, err := readFile(f)
			if err != nil {
				return nil, err
			}
			docs = append(docs, got...)
		}
	}
	return docs, nil
}

func expand(p string, recursive bool) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != p && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if extensions[strings.ToLower(filepath.Ext(path))] {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading directory %s: %w", p, err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("directory %s holds no .yaml, .yml or .json file", p)
	}
	return files, nil
}

func readFile(path string) ([]Document, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	return decode(path, f)
}

func decode(file string, r io.Reader) ([]Document, error) {
	where := file
	if file == "-" {
		where = "stdin"
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var docs []Document
	next := 1 // the index of the next document; empty ones (a leading ---, comments only) do not count
	for {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", where, next, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			continue
		}
		got, n, err := decodeDocument(file, next, raw)
		if err != nil {
			return nil, err
		}
		docs = append(docs, got...)
		next += n
	}
}

// decodeDocument decodes one YAML document, or a stream of JSON values, into objects; n is the
// number of documents it counted (JSON values one after another count one each).
func decodeDocument(file string, index int, raw []byte) (docs []Document, n int, err error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for ; ; n++ {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return docs, max(n, 1), nil
			}
			d := Document{File: file, Index: index + n}
			return nil, 0, fmt.Errorf("%s: not a Kubernetes object: %w", d.Where(), err)
		}
		if obj == nil {
			continue
		}
		d := Document{File: file, Index: index + n, Object: &unstructured.Unstructured{Object: obj}}
		if d.Object.GetKind() == "" || d.Object.GetAPIVersion() == "" {
			return nil, 0, fmt.Errorf("%s: not a Kubernetes object: apiVersion and kind are required", d.Where())
		}
		if d.Object.IsList() {
			items, err := listItems(d)
			if err != nil {
				return nil, 0, err
			}
			docs = append(docs, items...)
			continue
		}
		docs = append(docs, d)
	}
}

func listItems(d Document) ([]Document, error) {
	raw, _, _ := unstructured.NestedSlice(d.Object.Object, "items")
	var out []Document
	for i, item := range raw {
		m, ok := item.(map[string]any)
		it := Document{File: d.File, Index: d.Index, Item: i + 1}
		if !ok {
			return nil, fmt.Errorf("%s: not a Kubernetes object", it.Where())
		}
		it.Object = &unstructured.Unstructured{Object: m}
		if it.Object.GetKind() == "" || it.Object.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s: not a Kubernetes object: apiVersion and kind are required", it.Where())
		}
		out = append(out, it)
	}
	return out, nil
}

func stripComments(raw []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(raw, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' || string(t) == "---" {
			continue
		}
		out = append(out, line...)
		out = append(out, '\n')
	}
	return out
}
