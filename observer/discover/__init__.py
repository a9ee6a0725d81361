"""Target discovery: the Kubernetes API (pods, Argo Rollouts, autoscalers) → versions of the fleet."""
