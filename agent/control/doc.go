// Package control is how the world sees a running agent: the status it
// reports (Status, StepStatus and the step states), the control socket
// that serves `ferry status` and `ferry flush` (Listen, Server, Dial,
// Client), and the Prometheus metrics and health endpoint (Metrics,
// ListenMetrics). It knows nothing of how the agent works: the agent
// implements Controller.
package control
