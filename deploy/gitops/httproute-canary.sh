#!/usr/bin/env bash
# A model-version canary on an HTTPRoute across two InferencePools, raised step by step and gated by the
# observer's verdict at each step (`observer canary wait`): the pipeline step between "raise the weight" and
# "raise it again" that llm-d's and KServe's rollout guides leave to a person. Run it from a CI job, an Argo
# Workflows or Tekton step, or a shell; in a GitOps repository, replace `set_weights` with a commit of the
# route's weights and wait for the sync.
#
#   httproute-canary.sh ROUTE STABLE_POOL CANARY_POOL [STEP ...]      (steps in percent, default 5 25 50)
#
# The route's first rule must list the stable pool first and the canary second (deploy/k8s/primitives/
# httproute-inferencepools.yaml). The observer discovers both pools as versions named after them
# (discovery.kubernetes.models[].primitive: {kind: httproute_pools}), so they are the pair to judge.
# Exit: 0 promoted (canary at 100 %); 1 the verdict failed and the route was rolled back (stable at 100 %);
# 3 still undecided at a step's deadline: the weights stay where they are and a person decides;
# 4 no observer answered: the weights stay.
#
# Environment: OBSERVER_URL (default http://observer.observability.svc:9464), NAMESPACE (llm-serving),
# STEP_TIMEOUT (seconds per step, 1800: the step's planned end, where the verdict spends most of its α),
# INTERVAL (seconds between looks, 30), OBSERVER (the CLI, `observer`),
# KUBECTL (`kubectl`).
set -euo pipefail

if [ $# -lt 3 ]; then
  sed -n '2,20p' "$0" >&2
  exit 2
fi
route=$1 stable=$2 canary=$3
shift 3
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(5 25 50)
OBSERVER_URL=${OBSERVER_URL:-http://observer.observability.svc:9464}
NAMESPACE=${NAMESPACE:-llm-serving}
STEP_TIMEOUT=${STEP_TIMEOUT:-1800}
INTERVAL=${INTERVAL:-30}
OBSERVER=${OBSERVER:-observer}
KUBECTL=${KUBECTL:-kubectl}

set_weights() {  # stable% canary%
  echo "route $route: $stable $1 %, $canary $2 %"
  "$KUBECTL" -n "$NAMESPACE" patch httproute "$route" --type=json -p \
    "[{\"op\": \"replace\", \"path\": \"/spec/rules/0/backendRefs/0/weight\", \"value\": $1},
      {\"op\": \"replace\", \"path\": \"/spec/rules/0/backendRefs/1/weight\", \"value\": $2}]"
}

for w in "${steps[@]}"; do
  set_weights $((100 - w)) "$w"
  rc=0
  "$OBSERVER" canary wait --url "$OBSERVER_URL" --canary "$canary" --baseline "$stable" --weight "$w" --planned \
    --timeout "$STEP_TIMEOUT" --interval "$INTERVAL" || rc=$?
  case $rc in
    0) ;;
    1) echo "canary $canary failed at $w %: rolling back" >&2
       set_weights 100 0
       exit 1 ;;
    3) echo "canary $canary undecided at $w % after ${STEP_TIMEOUT} s: holding the weights here" >&2
       exit 3 ;;
    *) echo "no verdict for $canary at $w % (observer unreachable at $OBSERVER_URL): holding the weights" >&2
       exit 4 ;;
  esac
done
set_weights 0 100
echo "canary $canary promoted"
