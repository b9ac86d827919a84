// Package wire is the federation protocol between a member agent and the hub: one gRPC
// bidirectional stream per member, opened by the member, carrying JSON frames.
//
// The member sends Hello, then the changes the hub lacks (Upsert, Delete) each followed by a Flush,
// and Heartbeats while idle. The hub answers Hello with Welcome (the revision to resume from) and
// each Flush with an Ack. Revisions are the member's, increasing within one epoch (one run of the
// member agent); a hub that holds the member's epoch at revision R gets only what changed after R.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
)

// ServiceName and StreamMethod name the gRPC method (no .proto: the frames are JSON, see Codec).
const (
	ServiceName  = "kagenti.federation.v1alpha1.AgentCardFederation"
	StreamMethod = "/" + ServiceName + "/Stream"
)

// ProtocolVersion is sent in Hello; the hub refuses another.
const ProtocolVersion = 1

// MemberFrame is one frame from member to hub; exactly one field is set.
type MemberFrame struct {
	Hello     *Hello     `json:"hello,omitempty"`
	Upsert    *Upsert    `json:"upsert,omitempty"`
	Delete    *Delete    `json:"delete,omitempty"`
	Flush     *Flush     `json:"flush,omitempty"`
	Heartbeat *Heartbeat `json:"heartbeat,omitempty"`
}

// Hello opens a stream.
type Hello struct {
	Version int `json:"version"`
	// Cluster is the registration name the member believes it has on the hub.
	Cluster string `json:"cluster"`
	// ClusterID is the member's About API cluster ID (cluster.clusterset.k8s.io), "" without one.
	ClusterID string `json:"clusterID,omitempty"`
	// Epoch identifies this run of the member agent; revisions restart with it.
	Epoch string `json:"epoch"`
}

// Upsert publishes one card as the member verified it.
type Upsert struct {
	Revision  int64  `json:"rev"`
	Namespace string `json:"ns"`
	Name      string `json:"name"`
	// Card is the agent card with its signatures, as the member's AgentCard status holds it.
	Card json.RawMessage `json:"card"`
	// SpiffeID is the identity the member bound the card's signer to.
	SpiffeID string `json:"spiffeID"`
	// VerifiedAt is when the member's Verified condition last turned True.
	VerifiedAt time.Time `json:"verifiedAt"`
}

// Delete withdraws one card (deleted, unexported or no longer verified in the member).
type Delete struct {
	Revision  int64  `json:"rev"`
	Namespace string `json:"ns"`
	Name      string `json:"name"`
}

// Flush ends a batch: the member's state at Revision has been sent. Full is set on the batch that
// answers Welcome{ResumeFrom: 0}: the hub drops the member's cards the batch did not carry.
type Flush struct {
	Revision int64 `json:"rev"`
	Full     bool  `json:"full,omitempty"`
}

// Heartbeat keeps the member fresh while nothing changes.
type Heartbeat struct{}

// HubFrame is one frame from hub to member; exactly one field is set.
type HubFrame struct {
	Welcome *Welcome `json:"welcome,omitempty"`
	Ack     *Ack     `json:"ack,omitempty"`
}

// Welcome answers Hello.
type Welcome struct {
	// ResumeFrom is the member revision the hub holds for the Hello's epoch; 0 asks for everything.
	ResumeFrom int64 `json:"resumeFrom"`
	// HeartbeatMillis is how often the member must send a frame when idle.
	HeartbeatMillis int64 `json:"heartbeatMillis"`
}

// Ack answers Flush: the hub applied everything up to Revision.
type Ack struct {
	Revision int64 `json:"rev"`
	// Refused counts the member's cards the hub refuses (the reasons are in the FederatedCluster's status).
	Refused int `json:"refused,omitempty"`
}

// Validate checks that exactly one field of f is set and that it is well formed.
func (f *MemberFrame) Validate() error {
	n := 0
	for _, set := range []bool{f.Hello != nil, f.Upsert != nil, f.Delete != nil, f.Flush != nil, f.Heartbeat != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("a frame must carry exactly one of hello, upsert, delete, flush, heartbeat; this one carries %d", n)
	}
	switch {
	case f.Upsert != nil:
		if f.Upsert.Revision <= 0 || f.Upsert.Namespace == "" || f.Upsert.Name == "" || len(f.Upsert.Card) == 0 {
			return errors.New("upsert needs rev > 0, ns, name and card")
		}
	case f.Delete != nil:
		if f.Delete.Revision <= 0 || f.Delete.Namespace == "" || f.Delete.Name == "" {
			return errors.New("delete needs rev > 0, ns and name")
		}
	case f.Hello != nil:
		if f.Hello.Cluster == "" || f.Hello.Epoch == "" {
			return errors.New("hello needs cluster and epoch")
		}
	}
	return nil
}

// Codec carries frames as JSON: a card is JSON already, so it travels as it is (no base64, no
// schema compiler), and gRPC still gives the stream its framing, flow control, keepalives and
// message size limit.
type Codec struct{}

// Name is the gRPC content subtype.
func (Codec) Name() string { return "json" }

// Marshal encodes a frame.
func (Codec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes a frame.
func (Codec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Handler is what the hub implements.
type Handler interface {
	Stream(grpc.ServerStream) error
}

// ServiceDesc registers a Handler on a grpc.Server.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*Handler)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		Handler:       func(srv any, s grpc.ServerStream) error { return srv.(Handler).Stream(s) },
		ServerStreams: true,
		ClientStreams: true,
	}},
}
