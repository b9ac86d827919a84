package webhook_test

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
)

func counter(t *testing.T, m *injectorwebhook.Metrics, kind, op, result string) float64 {
	t.Helper()
	var out dto.Metric
	require.NoError(t, m.Requests.WithLabelValues(kind, op, result).Write(&out))
	return out.GetCounter().GetValue()
}
