package e2e

// agentChild names the stand-in agent (package agent) when the test kubelet re-executes this test
// binary as an agent pod's container (main_test.go).
const agentChild = "identity-agent"
