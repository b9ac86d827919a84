package authconfig

import (
	"fmt"
	"strconv"
	"strings"
)

// HelperOptions are the pod-level facts helper.conf needs besides the Config.
type HelperOptions struct {
	// CertDir is where spiffe-helper writes the SVID files (the shared volume).
	CertDir string
	// FileMode of the JWT SVID: readable by the identity sidecars, which share
	// a group (docs/identity.md); spiffe-helper's own default, 0600, would lock them out.
	FileMode uint32
	// HealthPort is where spiffe-helper serves /live and /ready for the kubelet's probes; 0
	// disables its health listener.
	HealthPort int32
}

// DefaultHelperFileMode lets the owner and the identity sidecars' shared group read the SVID.
const DefaultHelperFileMode = 0o640

// RenderHelperConf renders spiffe-helper's configuration (HCL) for c: the agent socket as a plain
// path (spiffe-helper adds unix:// itself), file names relative to cert_dir (it joins them with
// path.Join), daemon mode so that it keeps the SVID fresh.
func RenderHelperConf(c Config, o HelperOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# spiffe-helper configuration for %s/%s, rendered by kagenti-authbridge init at pod start.\n",
		c.Workload.Namespace, c.Workload.Name)
	fmt.Fprintf(&b, "agent_address = %s\n", hclString(c.Spiffe.SocketPath))
	fmt.Fprintf(&b, "cert_dir = %s\n", hclString(o.CertDir))
	b.WriteString("daemon_mode = true\n")
	fmt.Fprintf(&b, "jwt_svids = [{jwt_audience = %s, jwt_svid_file_name = %s}]\n",
		hclString(c.Spiffe.Audience), hclString(JWTSVIDFile))
	fmt.Fprintf(&b, "jwt_svid_file_mode = %d # %#o\n", o.FileMode, o.FileMode)
	if o.HealthPort > 0 {
		fmt.Fprintf(&b, "health_checks {\n  listener_enabled = true\n  bind_port = %d\n  liveness_path = \"/live\"\n  readiness_path = \"/ready\"\n}\n", o.HealthPort)
	}
	return b.String()
}

// hclString quotes s as an HCL (v1) string literal, whose escapes are Go's; spiffe-helper decodes
// without interpolation, so "${" needs no escape (the test feeds it through spiffe-helper).
func hclString(s string) string { return strconv.Quote(s) }
