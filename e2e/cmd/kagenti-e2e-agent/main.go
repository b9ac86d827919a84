// kagenti-e2e-agent is the stand-in agent of the e2e suite on kind (package agent): it listens on
// $AGENT_LISTEN and names itself $POD_NAME.
package main

import (
	"os"

	"github.com/kagenti/platform/e2e/framework/agent"
)

func main() { os.Exit(agent.Main()) }
