package identity

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const docsFile = "../../../docs/identity.md"

// The table of identity settings in the docs is the table the code runs on: a row added to
// Settings fails here until the docs are regenerated (UPDATE_GOLDEN=1).
func TestDocsTableIsTheTable(t *testing.T) {
	b, err := os.ReadFile(docsFile)
	require.NoError(t, err)
	doc := string(b)
	begin, end := strings.Index(doc, DocsTableBegin), strings.Index(doc, DocsTableEnd)
	require.True(t, begin >= 0 && end > begin, "%s has no %s ... %s section", docsFile, DocsTableBegin, DocsTableEnd)
	want := DocsTableBegin + "\n\n" + MarkdownTable() + "\n" + DocsTableEnd
	got := doc[begin : end+len(DocsTableEnd)]
	if os.Getenv("UPDATE_GOLDEN") == "1" && got != want {
		require.NoError(t, os.WriteFile(docsFile, []byte(doc[:begin]+want+doc[end+len(DocsTableEnd):]), 0o644))
		return
	}
	require.Equal(t, want, got, "docs/identity.md's table of settings is stale: UPDATE_GOLDEN=1 go test ./pkg/configmap/identity")
}
