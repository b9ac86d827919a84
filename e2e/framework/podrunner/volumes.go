package podrunner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pod's volumes live in directories of the pod's directory on the host, bind-mounted into each
// container at its mount paths. ConfigMap, Secret and downward-API volumes are kept in sync with
// the API the way the kubelet's atomic writer does it, so that programs watching them see what
// they would see in a pod: the files are symlinks into ..data, a symlink to a timestamped
// directory that is swapped in one rename.

// projectedFile is one file of a ConfigMap, Secret, downward-API or projected volume.
type projectedFile struct {
	data []byte
	mode os.FileMode
}

// volume is one materialized pod volume.
type volume struct {
	name string
	dir  string
	// project computes the files of a volume synced from the API; nil for emptyDir and CSI.
	project func(ctx context.Context) (map[string]projectedFile, error)
}

const defaultFileMode = 0o644 // the API's default for ConfigMap, Secret and downward-API volumes

// volumeSource turns a pod volume into a volume, or says why the runner cannot.
func (r *podRun) volumeSource(v corev1.Volume) (*volume, error) {
	vol := &volume{name: v.Name, dir: filepath.Join(r.dir, "volumes", v.Name)}
	switch {
	case v.EmptyDir != nil:
		if v.EmptyDir.Medium != corev1.StorageMediumDefault {
			return nil, fmt.Errorf("volume %s: emptyDir.medium %q is not supported", v.Name, v.EmptyDir.Medium)
		}
	case v.ConfigMap != nil:
		vol.project = r.configMapFiles(v.ConfigMap)
	case v.Secret != nil:
		vol.project = r.secretFiles(v.Secret)
	case v.DownwardAPI != nil:
		vol.project = r.downwardAPIFiles(v.DownwardAPI)
	case v.Projected != nil:
		project, err := r.projectedFiles(v.Projected)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		vol.project = project
	case v.CSI != nil:
		if v.CSI.Driver != spiffeCSIDriver {
			return nil, fmt.Errorf("volume %s: CSI driver %q is not supported (only %s)", v.Name, v.CSI.Driver, spiffeCSIDriver)
		}
		if r.k.SpireAgentSocketDir == "" {
			return nil, fmt.Errorf("volume %s: %s needs a SPIRE agent, and the runner has none (SpireAgentSocketDir)", v.Name, spiffeCSIDriver)
		}
		vol.dir = r.k.SpireAgentSocketDir // what the SPIFFE CSI driver mounts: the agent's socket directory
	default:
		return nil, fmt.Errorf("volume %s: this volume type is not supported (emptyDir, configMap, secret, downwardAPI, projected, csi %s are)", v.Name, spiffeCSIDriver)
	}
	return vol, nil
}

// spiffeCSIDriver is the SPIFFE CSI driver, which mounts the SPIRE agent's Workload API socket.
const spiffeCSIDriver = "csi.spiffe.io"

func (r *podRun) configMapFiles(src *corev1.ConfigMapVolumeSource) func(context.Context) (map[string]projectedFile, error) {
	return func(ctx context.Context) (map[string]projectedFile, error) {
		var cm corev1.ConfigMap
		err := r.k.Client.Get(ctx, client.ObjectKey{Namespace: r.pod.Namespace, Name: src.Name}, &cm)
		optional := src.Optional != nil && *src.Optional
		if apierrors.IsNotFound(err) && optional {
			return map[string]projectedFile{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("configMap %s: %w", src.Name, err)
		}
		data := map[string][]byte{}
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
		for k, v := range cm.BinaryData {
			data[k] = v
		}
		return selectKeys("configMap "+src.Name, data, src.Items, src.DefaultMode, optional)
	}
}

func (r *podRun) secretFiles(src *corev1.SecretVolumeSource) func(context.Context) (map[string]projectedFile, error) {
	return func(ctx context.Context) (map[string]projectedFile, error) {
		var s corev1.Secret
		err := r.k.Client.Get(ctx, client.ObjectKey{Namespace: r.pod.Namespace, Name: src.SecretName}, &s)
		optional := src.Optional != nil && *src.Optional
		if apierrors.IsNotFound(err) && optional {
			return map[string]projectedFile{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", src.SecretName, err)
		}
		return selectKeys("secret "+src.SecretName, s.Data, src.Items, src.DefaultMode, optional)
	}
}

// selectKeys is the kubelet's choice of files: every key, or only the listed items at their
// paths; a listed key that is missing is an error unless the volume is optional.
func selectKeys(what string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32, optional bool) (map[string]projectedFile, error) {
	mode := os.FileMode(defaultFileMode)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	files := map[string]projectedFile{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = projectedFile{data: v, mode: mode}
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q (items)", what, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		files[it.Path] = projectedFile{data: v, mode: m}
	}
	return files, nil
}

func (r *podRun) downwardAPIFiles(src *corev1.DownwardAPIVolumeSource) func(context.Context) (map[string]projectedFile, error) {
	return func(ctx context.Context) (map[string]projectedFile, error) {
		var pod corev1.Pod // labels and annotations change at run time; the kubelet follows them
		if err := r.k.Client.Get(ctx, client.ObjectKeyFromObject(r.pod), &pod); err != nil {
			return nil, err
		}
		mode := os.FileMode(defaultFileMode)
		if src.DefaultMode != nil {
			mode = os.FileMode(*src.DefaultMode)
		}
		files := map[string]projectedFile{}
		for _, it := range src.Items {
			var value string
			var err error
			switch {
			case it.FieldRef != nil:
				value, err = fieldValue(&pod, it.FieldRef.FieldPath)
			case it.ResourceFieldRef != nil:
				value, err = resourceValue(&pod, it.ResourceFieldRef.ContainerName, it.ResourceFieldRef)
			default:
				err = fmt.Errorf("item has neither fieldRef nor resourceFieldRef")
			}
			if err != nil {
				return nil, fmt.Errorf("downwardAPI item %s: %w", it.Path, err)
			}
			m := mode
			if it.Mode != nil {
				m = os.FileMode(*it.Mode)
			}
			files[it.Path] = projectedFile{data: []byte(value), mode: m}
		}
		return files, nil
	}
}

// projectedFiles is a projected volume's files: those of each source, as the volume of that type
// would have them, in one directory (one atomic write for all of them, as the kubelet does). Two
// sources writing the same path are an error. Service account tokens and cluster trust bundles
// are not supported.
func (r *podRun) projectedFiles(src *corev1.ProjectedVolumeSource) (func(context.Context) (map[string]projectedFile, error), error) {
	var parts []func(context.Context) (map[string]projectedFile, error)
	for i, s := range src.Sources {
		switch {
		case s.ConfigMap != nil:
			parts = append(parts, r.configMapFiles(&corev1.ConfigMapVolumeSource{LocalObjectReference: s.ConfigMap.LocalObjectReference,
				Items: s.ConfigMap.Items, Optional: s.ConfigMap.Optional, DefaultMode: src.DefaultMode}))
		case s.Secret != nil:
			parts = append(parts, r.secretFiles(&corev1.SecretVolumeSource{SecretName: s.Secret.Name,
				Items: s.Secret.Items, Optional: s.Secret.Optional, DefaultMode: src.DefaultMode}))
		case s.DownwardAPI != nil:
			parts = append(parts, r.downwardAPIFiles(&corev1.DownwardAPIVolumeSource{Items: s.DownwardAPI.Items, DefaultMode: src.DefaultMode}))
		default:
			return nil, fmt.Errorf("projected source %d: only configMap, secret and downwardAPI sources are supported", i)
		}
	}
	return func(ctx context.Context) (map[string]projectedFile, error) {
		files := map[string]projectedFile{}
		for i, part := range parts {
			fs, err := part(ctx)
			if err != nil {
				return nil, fmt.Errorf("projected source %d: %w", i, err)
			}
			for path, f := range fs {
				if _, dup := files[path]; dup {
					return nil, fmt.Errorf("projected source %d: %s is written by an earlier source too", i, path)
				}
				files[path] = f
			}
		}
		return files, nil
	}, nil
}

// sync writes the volume's current files when they differ from what is on disk.
func (v *volume) sync(ctx context.Context) error {
	if v.project == nil {
		return nil
	}
	files, err := v.project(ctx)
	if err != nil {
		return err
	}
	return writeAtomically(v.dir, files)
}

const dataDir = "..data"

// writeAtomically is the kubelet's atomic writer: the files go into a new timestamped directory,
// ..data is switched to it by a rename, each top-level name is a symlink through ..data, and the
// previous directory is removed. Unchanged content is left alone (no event for watchers).
func writeAtomically(dir string, files map[string]projectedFile) error {
	if unchanged(dir, files) {
		return nil
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for path, f := range files {
		p := filepath.Join(ts, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil { // WriteFile's mode is filtered by the umask
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, dataDir))
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, dataDir)); err != nil {
		return err
	}
	if err := linkTopLevelNames(dir, files); err != nil {
		return err
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

func unchanged(dir string, files map[string]projectedFile) bool {
	if _, err := os.Lstat(filepath.Join(dir, dataDir)); err != nil {
		return false
	}
	var onDisk []string
	_ = filepath.WalkDir(filepath.Join(dir, dataDir)+"/", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join(dir, dataDir), p)
			onDisk = append(onDisk, rel)
		}
		return nil
	})
	if len(onDisk) != len(files) {
		return false
	}
	for path, f := range files {
		p := filepath.Join(dir, dataDir, path)
		b, err := os.ReadFile(p)
		info, serr := os.Stat(p)
		if err != nil || serr != nil || !bytes.Equal(b, f.data) || info.Mode().Perm() != f.mode.Perm() {
			return false
		}
	}
	return true
}

// linkTopLevelNames points each top-level name of files through ..data and removes the links of
// names that are gone.
func linkTopLevelNames(dir string, files map[string]projectedFile) error {
	want := map[string]bool{}
	for path := range files {
		top, _, _ := strings.Cut(path, "/")
		want[top] = true
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		link := filepath.Join(dir, n)
		if target, err := os.Readlink(link); err == nil && target == filepath.Join(dataDir, n) {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(dataDir, n), link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !want[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
