package register

import (
	"errors"
	"fmt"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// A client's name comes from a template that a TokenExchange (a namespace's user) or the
// injector's configuration sets, so the name alone never proves whose client it is: a template
// naming another namespace's client, or two templates that render the same name, would otherwise
// make register rewrite that client's settings and hand its secret to this pod. Every client
// register creates therefore carries an owner marker, "<namespace>/<workload>", and register
// reads an existing client's marker before it updates the client or reads its secret. A client
// without a marker is refused as well: it was made by hand or by an older kagenti-authbridge, and
// nothing that an older version wrote can tell the two apart (its description was rewritten by
// whichever workload last registered under the name). A person adopts it by setting the marker.

// OwnerAttribute is the Keycloak client attribute that holds the owner marker. A client
// representation's attributes are free-form strings that Keycloak keeps and returns with the client.
const OwnerAttribute = "kagenti.io/owner"

// OwnerOf returns the owner marker of workload w: its namespace and name. Both are DNS labels
// (RFC 1123: lower-case letters, digits and '-'), so the '/' between them makes the marker
// unambiguous: no pair of namespace and name renders another pair's marker.
func OwnerOf(w authconfig.Workload) string {
	return w.Namespace + "/" + w.Name
}

// errNoOwner: a client is never registered without an owner marker.
var errNoOwner = errors.New("no owner marker for the client: the workload's namespace and name are required")

// ClientOwnedElsewhereError is a refusal to touch an existing client whose owner marker is not
// this workload's: nothing of it was changed or read beyond its marker.
type ClientOwnedElsewhereError struct {
	// Client names the client as the provider knows it (its clientId, or client_name and ID).
	Client string
	// Owner is the marker found on it; "" when it has none.
	Owner string
	// Want is this workload's marker.
	Want string
	// Adopt says how a person lets this workload manage a client that has no marker.
	Adopt string
}

func (e *ClientOwnedElsewhereError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("client %s exists without an owner marker (made by hand or by an older kagenti-authbridge) and is left untouched: %s; or choose another clientNameTemplate",
			e.Client, e.Adopt)
	}
	return fmt.Sprintf("client %s belongs to workload %s, not to %s, and is left untouched: choose another clientNameTemplate",
		e.Client, e.Owner, e.Want)
}
