package kit

import corev1 "k8s.io/api/core/v1"

// digestAnnotation carries, on a ConfigMap held by a cache with DigestTransform, the hash of the
// content the transform dropped. It exists only in memory: Apply never writes it.
const digestAnnotation = "kagenti.io/cached-content-hash"

// DigestTransform is the cache transform (cache.ByObject.Transform) for the ConfigMaps an Applier
// writes: it replaces data and binaryData by the hash of that content, and drops managedFields, so
// a controller's cache holds a few hundred bytes of metadata per ConfigMap instead of its content.
// Apply compares content by hash, so it behaves the same on digested and on full objects, hand
// edits included; readers that need the content must read from the API server.
func DigestTransform(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj, nil
	}
	// The object is fresh from the watch decoder and not shared yet: changed in place.
	h := ContentHash(cm)
	cm.Data, cm.BinaryData, cm.ManagedFields = nil, nil, nil
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[digestAnnotation] = h
	return cm, nil
}

// observedHash is the hash of cm's content as stored: the digest when a DigestTransform dropped the
// content, computed otherwise.
func observedHash(cm *corev1.ConfigMap) string {
	if h, ok := cm.Annotations[digestAnnotation]; ok {
		return h
	}
	return ContentHash(cm)
}
