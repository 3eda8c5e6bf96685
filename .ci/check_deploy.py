#!/usr/bin/env python3
"""Checks of Gatehouse's deployment artefacts that need no cluster and no container engine.

  check_deploy.py k8s RENDERED.yaml --kubernetes-version 1.30.0
      every document against the Kubernetes JSON schemas shipped by the
      kubernetes-validate package (strict: unknown fields fail), then the
      references between objects that no schema sees.
  check_deploy.py compose docker-compose.yml
      the compose file's structure and the nginx upstream it relies on.
  check_deploy.py dockerfile Dockerfile --rendered RENDERED.yaml
      the image contract (stages, user, port, entrypoint) and that the
      Kubernetes manifests agree with it.

Prints one line per object or check ("ok  ..." / "FAIL ..."); exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

import yaml


class Report:
    def __init__(self) -> None:
        self.failures = 0
        self.checks = 0

    def ok(self, area: str, what: str) -> None:
        self.checks += 1
        print(f"ok    {area:<10} {what}")

    def fail(self, area: str, what: str, why: str) -> None:
        self.checks += 1
        self.failures += 1
        print(f"FAIL  {area:<10} {what}: {why}")

    def check(self, area: str, what: str, problems: list[str]) -> None:
        if problems:
            self.fail(area, what, "; ".join(problems))
        else:
            self.ok(area, what)


def load_docs(path: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def ref(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def selects(selector: dict, labels: dict) -> bool:
    """matchLabels-only selector semantics (matchExpressions are not used here)."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# --------------------------------------------------------------------------- k8s

POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
# src/config.rs: GATEHOUSE_SHUTDOWN_GRACE_MS defaults to 10 s.
SERVER_DRAIN_DEFAULT_MS = 10_000


def pod_spec(obj: dict) -> dict | None:
    if obj["kind"] in POD_TEMPLATE_KINDS:
        return obj["spec"]["template"]["spec"]
    return None


def pod_labels(obj: dict) -> dict:
    return obj["spec"]["template"].get("metadata", {}).get("labels", {})


def restricted_problems(spec: dict) -> list[str]:
    """The parts of the 'restricted' Pod Security Standard plus our own hardening."""
    problems = []
    pod_sc = spec.get("securityContext", {})
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        problems.append("uses host namespaces")
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        name = c["name"]
        if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True):
            problems.append(f"{name}: runAsNonRoot is not true")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: readOnlyRootFilesystem is not true")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if sc.get("capabilities", {}).get("add"):
            problems.append(f"{name}: adds capabilities")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is not RuntimeDefault")
        res = c.get("resources", {})
        for part in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in res.get(part, {}):
                    problems.append(f"{name}: no {part}.{r}")
    return problems


def check_k8s(args: argparse.Namespace) -> Report:
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError, ValidationError, VersionNotSupportedError

    rep = Report()
    docs = load_docs(args.rendered)
    mode = "strict" if args.strict else "non-strict"

    # 1. Schemas: a kind without a schema is a failure, not a warning.
    for obj in docs:
        where = f"{ref(obj)} ({obj.get('apiVersion')})"
        try:
            got = kubernetes_validate.validate(obj, args.kubernetes_version, strict=args.strict)
            rep.ok("schema", f"{where} valid against Kubernetes {got} ({mode})")
        except ValidationError as err:
            path = ".".join(str(p) for p in err.path) or "(root)"
            rep.fail("schema", where, f"{path}: {err.message}")
        except SchemaNotFoundError as err:
            rep.fail("schema", where, err.message)
        except VersionNotSupportedError as err:
            rep.fail("schema", where, err.message)

    # 2. References between objects.
    by_kind: dict[str, dict[str, dict]] = {}
    for obj in docs:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    namespaces = set(by_kind.get("Namespace", {}))
    workloads = [o for o in docs if o["kind"] in POD_TEMPLATE_KINDS]

    for obj in docs:
        if obj["kind"] == "Namespace":
            continue
        ns = obj["metadata"].get("namespace")
        rep.check("namespace", f"{ref(obj)} in namespace {ns}",
                  [] if ns in namespaces else [f"namespace {ns!r} is not among the rendered Namespaces {sorted(namespaces)}"])

    for obj in workloads:
        spec = pod_spec(obj)
        problems = []
        if obj["kind"] != "Job":
            sel = obj["spec"]["selector"].get("matchLabels", {})
            if not selects(sel, pod_labels(obj)):
                problems.append("selector does not match the pod template labels")
        sa = spec.get("serviceAccountName")
        if sa and sa not in by_kind.get("ServiceAccount", {}):
            problems.append(f"serviceAccountName {sa} not defined")
        for c in spec["containers"]:
            for src in c.get("envFrom", []):
                for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                    name = src.get(key, {}).get("name")
                    if name and name not in by_kind.get(kind, {}) and not src[key].get("optional"):
                        problems.append(f"{c['name']}: envFrom {kind} {name} not defined")
            volumes = {v["name"] for v in spec.get("volumes", [])}
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    problems.append(f"{c['name']}: volumeMount {m['name']} has no volume")
            ports = {p.get("name") for p in c.get("ports", [])} | {p["containerPort"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                port = c.get(probe, {}).get("httpGet", {}).get("port")
                if port is not None and port not in ports:
                    problems.append(f"{c['name']}: {probe} port {port} is not a container port")
        rep.check("refs", f"{ref(obj)} selector, service account, config and volumes", problems)
        rep.check("hardening", f"{ref(obj)} pod security (restricted) and resources", restricted_problems(spec))

    servers = [w for w in workloads if w["kind"] != "Job"]
    jobs = [w for w in workloads if w["kind"] == "Job"]

    # Shutdown fits the grace period: preStop sleep, then the server's own drain
    # (GATEHOUSE_SHUTDOWN_GRACE_MS, 10 s unless the ConfigMap sets it), before SIGKILL.
    config_data = {k: v for cm in by_kind.get("ConfigMap", {}).values() for k, v in (cm.get("data") or {}).items()}
    drain_s = int(config_data.get("GATEHOUSE_SHUTDOWN_GRACE_MS", SERVER_DRAIN_DEFAULT_MS)) / 1000
    for w in servers:
        spec = pod_spec(w)
        grace = spec.get("terminationGracePeriodSeconds", 30)
        problems = []
        for c in spec["containers"]:
            pre = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            if pre + drain_s >= grace:
                problems.append(f"{c['name']}: preStop {pre}s + drain {drain_s:g}s >= terminationGracePeriodSeconds {grace}")
        rep.check("shutdown", f"{ref(w)} drains within its {grace}s grace period", problems)

    for svc in by_kind.get("Service", {}).values():
        sel = svc["spec"].get("selector", {})
        targets = [w for w in servers if selects(sel, pod_labels(w))]
        problems = [] if targets else ["selects no workload's pods"]
        problems += [f"also selects {ref(j)} pods" for j in jobs if selects(sel, pod_labels(j))]
        if svc["spec"].get("sessionAffinity", "None") != "None":
            problems.append("has session affinity")
        for p in svc["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            for w in targets:
                names = {cp.get("name") for c in pod_spec(w)["containers"] for cp in c.get("ports", [])}
                nums = {cp["containerPort"] for c in pod_spec(w)["containers"] for cp in c.get("ports", [])}
                if tp not in names | nums:
                    problems.append(f"targetPort {tp} is not a port of {ref(w)}")
        rep.check("refs", f"{ref(svc)} selects {', '.join(ref(w) for w in targets) or 'nothing'}", problems)

    for ing in by_kind.get("Ingress", {}).values():
        problems = []
        annotations = ing["metadata"].get("annotations", {})
        problems += [f"session affinity annotation {k}" for k in annotations if "affinity" in k or "sticky" in k]
        for rule in ing["spec"].get("rules", []):
            for path in rule.get("http", {}).get("paths", []):
                backend = path["backend"]["service"]
                svc = by_kind.get("Service", {}).get(backend["name"])
                if svc is None:
                    problems.append(f"backend Service {backend['name']} not defined")
                    continue
                port = backend["port"]
                svc_ports = {p.get("name") for p in svc["spec"]["ports"]} | {p["port"] for p in svc["spec"]["ports"]}
                if port.get("name", port.get("number")) not in svc_ports:
                    problems.append(f"backend port {port} not on Service {backend['name']}")
        rep.check("refs", f"{ref(ing)} backends exist, no affinity", problems)

    hpas = list(by_kind.get("HorizontalPodAutoscaler", {}).values())
    for hpa in hpas:
        target = hpa["spec"]["scaleTargetRef"]
        w = by_kind.get(target["kind"], {}).get(target["name"])
        problems = [] if w else [f"scale target {target['kind']}/{target['name']} not defined"]
        if hpa["spec"].get("minReplicas", 1) > hpa["spec"]["maxReplicas"]:
            problems.append("minReplicas > maxReplicas")
        uses_cpu = any(m.get("resource", {}).get("name") == "cpu" for m in hpa["spec"].get("metrics", []))
        if w and uses_cpu:
            if not all("cpu" in c.get("resources", {}).get("requests", {}) for c in pod_spec(w)["containers"]):
                problems.append("CPU utilization target, but a container has no CPU request")
        rep.check("refs", f"{ref(hpa)} scales {target['kind']}/{target['name']}", problems)

    for pdb in by_kind.get("PodDisruptionBudget", {}).values():
        sel = pdb["spec"]["selector"].get("matchLabels", {})
        covered = [w for w in servers if selects(sel, pod_labels(w))]
        problems = [] if covered else ["selects no workload's pods"]
        problems += [f"also selects {ref(j)} pods" for j in jobs if selects(sel, pod_labels(j))]
        min_avail = pdb["spec"].get("minAvailable")
        if isinstance(min_avail, int):
            for w in covered:
                floor = min([h["spec"].get("minReplicas", 1) for h in hpas
                             if h["spec"]["scaleTargetRef"]["name"] == w["metadata"]["name"]]
                            or [w["spec"].get("replicas", 1)])
                if min_avail >= floor:
                    problems.append(f"minAvailable {min_avail} >= {floor} replicas of {ref(w)}: a drain could never evict")
        rep.check("refs", f"{ref(pdb)} covers {', '.join(ref(w) for w in covered) or 'nothing'}", problems)

    return rep


# ----------------------------------------------------------------------- compose

EXPECTED_SERVICES = {"postgres", "pgbouncer", "migrate", "gatehouse-1", "gatehouse-2", "lb", "oidc"}
GATEHOUSE_ENV = {
    "DATABASE_URL", "GATEHOUSE_PUBLIC_URL", "GATEHOUSE_OIDC_ISSUER", "GATEHOUSE_OIDC_CLIENT_ID",
    "GATEHOUSE_OIDC_CLIENT_SECRET", "GATEHOUSE_ENV", "GATEHOUSE_VAULT_KEYS", "RUST_LOG",
}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def env_keys(env) -> set[str]:
    if isinstance(env, dict):
        return set(env)
    return {item.split("=", 1)[0] for item in env or []}


def command_words(cmd) -> list[str]:
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd or [])


def check_compose(args: argparse.Namespace) -> Report:
    rep = Report()
    path = Path(args.compose)
    root = path.parent
    doc = yaml.safe_load(path.read_text())
    top_extra = [k for k in doc if k not in {"name", "services", "volumes", "networks", "configs", "secrets"}
                 and not k.startswith("x-")]
    rep.check("compose", f"{path.name} top-level keys", [f"unknown top-level key {k}" for k in top_extra])

    services: dict = doc.get("services") or {}
    missing = sorted(EXPECTED_SERVICES - set(services))
    rep.check("compose", f"services present: {', '.join(sorted(services))}",
              [f"missing service {m}" for m in missing])
    volumes = set(doc.get("volumes") or {})

    def deps(svc: dict) -> dict:
        d = svc.get("depends_on") or {}
        return {name: {"condition": "service_started"} for name in d} if isinstance(d, list) else d

    for name, svc in services.items():
        problems = []
        if not (svc.get("image") or svc.get("build")):
            problems.append("neither image nor build")
        for target, spec in deps(svc).items():
            if target not in services:
                problems.append(f"depends_on unknown service {target}")
                continue
            cond = (spec or {}).get("condition", "service_started")
            if cond not in CONDITIONS:
                problems.append(f"depends_on {target}: unknown condition {cond}")
            if cond == "service_healthy" and not services[target].get("healthcheck"):
                problems.append(f"depends_on {target} healthy, but {target} has no healthcheck")
            if cond == "service_completed_successfully" and services[target].get("restart", "no") not in ("no", False):
                problems.append(f"depends_on {target} completing, but {target} restarts")
        for vol in svc.get("volumes") or []:
            source = vol.split(":", 1)[0] if isinstance(vol, str) else vol.get("source", "")
            if source.startswith((".", "/")):
                if not (root / source).exists():
                    problems.append(f"bind mount source {source} does not exist")
            elif source and source not in volumes:
                problems.append(f"named volume {source} not declared")
        hc = svc.get("healthcheck")
        if hc and not hc.get("disable") and not hc.get("test"):
            problems.append("healthcheck without test")
        rep.check("compose", f"service {name} ({svc.get('image', 'build')})", problems)

    # No dependency cycles (compose would refuse to start).
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> list[str]:
        if state.get(n) == 1:
            return [" -> ".join(trail + [n])]
        if state.get(n) == 2 or n not in services:
            return []
        state[n] = 1
        found = [c for t in deps(services[n]) for c in visit(t, trail + [n])]
        state[n] = 2
        return found

    cycles = [c for n in services for c in visit(n, [])]
    rep.check("compose", "depends_on graph has no cycle", [f"cycle {c}" for c in cycles])

    # The Gatehouse services: one image, the right subcommand, the whole environment.
    gh = {n: s for n, s in services.items() if n == "migrate" or n.startswith("gatehouse-")}
    images = {s.get("image") for s in gh.values()}
    for name, svc in sorted(gh.items()):
        problems = []
        want = "migrate" if name == "migrate" else "serve"
        if command_words(svc.get("command"))[:1] != [want]:
            problems.append(f"command is {svc.get('command')!r}, want {want}")
        lacking = sorted(GATEHOUSE_ENV - env_keys(svc.get("environment")))
        if lacking:
            problems.append(f"environment lacks {', '.join(lacking)}")
        if len(images) != 1:
            problems.append(f"Gatehouse services use different images {sorted(map(str, images))}")
        if name != "migrate" and deps(svc).get("migrate", {}).get("condition") != "service_completed_successfully":
            problems.append("does not wait for migrate to complete successfully")
        rep.check("compose", f"{name}: gatehouse {want} with the full environment", problems)

    # The pooler: the replicas' pool goes through pgbouncer in transaction mode, so they say
    # so (GATEHOUSE_DB_POOLER) and reach PostgreSQL directly for migrations and LISTEN.
    ini_path = root / "deploy/compose/pgbouncer.ini"
    ini = ini_path.read_text() if ini_path.exists() else ""
    mode = re.search(r"^\s*pool_mode\s*=\s*(\w+)", ini, re.M)
    problems = [] if mode and mode.group(1) == "transaction" else [f"{ini_path.name}: pool_mode is not transaction"]
    if not re.search(r"^\s*ignore_startup_parameters\s*=.*extra_float_digits", ini, re.M):
        problems.append(f"{ini_path.name}: ignore_startup_parameters lacks extra_float_digits")
    for name, svc in sorted(gh.items()):
        env = svc.get("environment") or {}
        env = env if isinstance(env, dict) else dict(item.split("=", 1) for item in env)
        if "@pgbouncer:" not in str(env.get("DATABASE_URL", "")):
            problems.append(f"{name}: DATABASE_URL does not go through pgbouncer")
        if env.get("GATEHOUSE_DB_POOLER") != "transaction":
            problems.append(f"{name}: GATEHOUSE_DB_POOLER is not transaction")
        if "@postgres:" not in str(env.get("GATEHOUSE_MIGRATE_URL", "")):
            problems.append(f"{name}: GATEHOUSE_MIGRATE_URL does not go to postgres directly")
    rep.check("compose", "pgbouncer: transaction mode, replicas pooled through it, migrations direct", problems)

    # The load balancer: round-robin over every replica, no affinity.
    lb = services.get("lb", {})
    conf_path = None
    for vol in lb.get("volumes") or []:
        src, _, dst = (vol if isinstance(vol, str) else f"{vol['source']}:{vol['target']}").partition(":")
        if dst.split(":")[0] == "/etc/nginx/nginx.conf":
            conf_path = root / src
    problems = []
    if conf_path is None or not conf_path.is_file():
        problems.append("lb does not mount an nginx.conf at /etc/nginx/nginx.conf")
    else:
        conf = re.sub(r"#[^\n]*", "", conf_path.read_text())
        upstream_servers = set(re.findall(r"^\s*server\s+([\w.-]+:\d+)", conf, re.M))
        replicas = {f"{n}:8080" for n in services if n.startswith("gatehouse-")}
        if upstream_servers != replicas:
            problems.append(f"upstream servers {sorted(upstream_servers)} != replicas {sorted(replicas)}")
        for sticky in ("ip_hash", "sticky", "hash ", "least_conn", "random"):
            if re.search(rf"^\s*{sticky}", conf, re.M):
                problems.append(f"upstream uses {sticky.strip()}, not round-robin")
        if "8080:8080" not in [str(p) for p in lb.get("ports") or []]:
            problems.append("lb does not publish port 8080")
    rep.check("compose", "lb: nginx round-robin over every replica, port 8080 published", problems)

    # The OpenID provider's script and its locked dependencies (npm ci needs both).
    oidc = services.get("oidc", {})
    problems = []
    src = next((root / v.split(":")[0] for v in oidc.get("volumes") or []
                if isinstance(v, str) and v.startswith(".")), None)
    if src is None or not src.is_dir():
        problems.append("oidc mounts no source directory")
    else:
        words = " ".join(command_words(oidc.get("command"))).split()
        script = next((w for w in words if w.endswith(".mjs")), None)
        if not script or not (src / script).is_file():
            problems.append(f"oidc script {script} not in {src}")
        try:
            pkg = json.loads((src / "package.json").read_text())
            lock = json.loads((src / "package-lock.json").read_text())
            if lock.get("packages", {}).get("", {}).get("dependencies") != pkg.get("dependencies"):
                problems.append("package-lock.json is out of date with package.json")
            if "oidc-provider" not in pkg.get("dependencies", {}):
                problems.append("package.json does not depend on oidc-provider")
        except (OSError, ValueError) as err:
            problems.append(f"package.json / package-lock.json: {err}")
    rep.check("compose", "oidc: script, package.json and package-lock.json agree", problems)
    return rep


# -------------------------------------------------------------------- dockerfile


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def check_dockerfile(args: argparse.Namespace) -> Report:
    rep = Report()
    instrs = dockerfile_instructions(Path(args.dockerfile).read_text())
    stages: list[list[tuple[str, str]]] = []
    for ins in instrs:
        if ins[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    # ARGs before the first FROM parameterise the FROM lines.
    args_defaults: dict[str, str] = {}
    for w, a in instrs:
        if w == "FROM":
            break
        if w == "ARG" and "=" in a:
            k, v = a.split("=", 1)
            args_defaults[k] = v

    def expand(s: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: args_defaults.get(m.group(1), m.group(0)), s)

    problems = []
    if len(stages) < 2:
        problems.append("not multi-stage")
    else:
        first, last = stages[0], stages[-1]
        base = expand(first[0][1])
        if not re.match(r"rust:[\d.]+-bookworm\s+AS\s+builder$", base, re.I):
            problems.append(f"builder stage is {base!r}")
        if not any(w == "RUN" and "cargo build --release --locked" in a for w, a in first):
            problems.append("builder does not run cargo build --release --locked")
        if expand(last[0][1]).split()[0] != "debian:bookworm-slim":
            problems.append(f"runtime stage is {last[0][1]!r}")
    rep.check("dockerfile", "stages: rust bookworm builder, debian:bookworm-slim runtime", problems)

    final = stages[-1] if stages else []
    last_of = {w: a for w, a in final}
    problems = []
    if last_of.get("USER", "").split(":")[0] != "10001":
        problems.append(f"USER is {last_of.get('USER')!r}, want 10001")
    if json.loads(last_of.get("ENTRYPOINT", "null") or "null") != ["/usr/local/bin/gatehouse"]:
        problems.append(f"ENTRYPOINT is {last_of.get('ENTRYPOINT')!r}")
    if json.loads(last_of.get("CMD", "null") or "null") != ["serve"]:
        problems.append(f"CMD is {last_of.get('CMD')!r}")
    if "8080" not in last_of.get("EXPOSE", "").split():
        problems.append("does not EXPOSE 8080")
    if not any(w == "ENV" and "GATEHOUSE_LISTEN=0.0.0.0:8080" in a for w, a in final):
        problems.append("ENV GATEHOUSE_LISTEN=0.0.0.0:8080 missing")
    if not any(w == "COPY" and "--from=builder" in a and "/usr/local/bin/gatehouse" in a for w, a in final):
        problems.append("runtime does not copy the binary from the builder to /usr/local/bin/gatehouse")
    rep.check("dockerfile", "runtime contract: user 10001, entrypoint, CMD serve, port 8080", problems)

    if args.rendered:
        problems = []
        for obj in load_docs(args.rendered):
            spec = pod_spec(obj)
            if spec is None:
                continue
            for c in spec["containers"]:
                uid = c.get("securityContext", {}).get("runAsUser", spec.get("securityContext", {}).get("runAsUser"))
                if uid != 10001:
                    problems.append(f"{ref(obj)}/{c['name']} runs as {uid}, the image's user is 10001")
                for p in c.get("ports", []):
                    if p["containerPort"] != 8080:
                        problems.append(f"{ref(obj)}/{c['name']} port {p['containerPort']}, the image listens on 8080")
                if c.get("command"):
                    problems.append(f"{ref(obj)}/{c['name']} overrides the image ENTRYPOINT")
        rep.check("dockerfile", "Kubernetes pods agree with the image (uid, port, entrypoint)", problems)
    return rep


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("k8s")
    k.add_argument("rendered")
    k.add_argument("--kubernetes-version", required=True)
    k.add_argument("--strict", action=argparse.BooleanOptionalAction, default=True)
    c = sub.add_parser("compose")
    c.add_argument("compose")
    d = sub.add_parser("dockerfile")
    d.add_argument("dockerfile")
    d.add_argument("--rendered")
    args = parser.parse_args()
    rep = {"k8s": check_k8s, "compose": check_compose, "dockerfile": check_dockerfile}[args.cmd](args)
    if rep.checks == 0:
        print(f"FAIL  {args.cmd:<10} nothing was checked")
        return 1
    return 1 if rep.failures else 0


if __name__ == "__main__":
    sys.exit(main())
