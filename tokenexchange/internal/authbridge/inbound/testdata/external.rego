# The policy of TestARealOPADecidesThroughTheInboundProxy: the middle workload may call this
# agent on behalf of user-1 (the token's sub claim) with agent:invoke; nothing else.
package envoy.authz

import rego.v1

default allow := {"allowed": false, "reason": "only middle, for user-1"}

identity := input.attributes.metadata_context.filter_metadata["kagenti.authbridge"]

allow := {"allowed": true} if {
	input.attributes.source.principal == "spiffe://cluster.local/ns/agents/sa/middle"
	identity.subject == "user-1"
	"agent:invoke" in identity.scopes
	input.parsed_path == ["tasks"]
}
