# A policy as written for OPA's envoy plugin: the planner may send messages to this agent on
# behalf of anyone with weather:read; tasks/get is open to any verified caller; nothing else.
package envoy.authz

import rego.v1

default allow := {"allowed": false, "reason": "no rule allows this request"}

identity := input.attributes.metadata_context.filter_metadata["kagenti.authbridge"]

allow := {"allowed": true} if {
	input.attributes.request.http.method == "POST"
	input.parsed_path == ["a2a"]
	input.attributes.source.principal == "spiffe://example.org/ns/team/sa/planner"
	identity.rpc_method == "message/send"
	"weather:read" in identity.scopes
}

allow := {"allowed": true} if {
	identity.rpc_method == "tasks/get"
}
