package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
)

// ContentHash is the hash of a ConfigMap's content, independent of map order: the
// kagenti.io/content-hash a controller records on the ConfigMaps it writes
// (configmap.ContentHash), and the content hash kagenti-authbridge reports for the files of
// {workload}-token-exchange it runs (authconfig.ContentHash), so that the controller can tell
// which pods run what it wrote. One computation for both: the data plane links this package
// without the controller libraries.
func ContentHash(data map[string]string, binaryData map[string][]byte) string {
	h := sha256.New()
	keys := make([]string, 0, max(len(data), len(binaryData)))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "d%d:%s%d:", len(k), k, len(data[k]))
		h.Write([]byte(data[k]))
	}
	keys = keys[:0]
	for k := range binaryData {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "b%d:%s%d:", len(k), k, len(binaryData[k]))
		h.Write(binaryData[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}
