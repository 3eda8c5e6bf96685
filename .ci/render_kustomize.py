#!/usr/bin/env python3
"""Render a kustomize base without kubectl or kustomize, for validation only.

Implements exactly the kustomization features that deploy/base uses and refuses
anything else, so a new feature cannot be silently ignored:

- `resources`: local YAML files (one or more documents each), in listed order;
- `namespace`: set on every namespaced object, and as the name of a Namespace
  object (as kustomize's namespace transformer does);
- `labels`: entries of `pairs` with `includeSelectors: false`, optionally
  `includeTemplates: true` (labels also go on pod templates, never selectors).

Usage: render_kustomize.py DIR [> rendered.yaml]
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

SUPPORTED_FIELDS = {"apiVersion", "kind", "namespace", "labels", "resources"}
SUPPORTED_LABEL_FIELDS = {"pairs", "includeSelectors", "includeTemplates"}

# Kinds without a namespace (only those a Gatehouse base could plausibly hold).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "IngressClass",
    "PersistentVolume",
    "PriorityClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}

# Where a workload keeps its pod template(s), as key paths from the object root.
TEMPLATE_LABEL_PATHS = {
    "Deployment": [("spec", "template", "metadata", "labels")],
    "StatefulSet": [("spec", "template", "metadata", "labels")],
    "DaemonSet": [("spec", "template", "metadata", "labels")],
    "ReplicaSet": [("spec", "template", "metadata", "labels")],
    "Job": [("spec", "template", "metadata", "labels")],
    "CronJob": [
        ("spec", "jobTemplate", "metadata", "labels"),
        ("spec", "jobTemplate", "spec", "template", "metadata", "labels"),
    ],
}


class RenderError(Exception):
    pass


def _labels_at(obj: dict, path: tuple[str, ...]) -> dict:
    node = obj
    for key in path:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise RenderError(f"{obj.get('kind')}: {'.'.join(path)} is not a mapping")
    return node


def load_kustomization(base: Path) -> dict:
    path = base / "kustomization.yaml"
    if not path.is_file():
        raise RenderError(f"{path}: not found")
    kust = yaml.safe_load(path.read_text())
    if not isinstance(kust, dict):
        raise RenderError(f"{path}: not a mapping")
    if kust.get("apiVersion") != "kustomize.config.k8s.io/v1beta1" or kust.get("kind") != "Kustomization":
        raise RenderError(f"{path}: apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization")
    unsupported = sorted(set(kust) - SUPPORTED_FIELDS)
    if unsupported:
        raise RenderError(f"{path}: fields this renderer does not implement: {', '.join(unsupported)}")
    for entry in kust.get("labels") or []:
        extra = sorted(set(entry) - SUPPORTED_LABEL_FIELDS)
        if extra:
            raise RenderError(f"{path}: labels entry has unsupported fields: {', '.join(extra)}")
        if entry.get("includeSelectors", False):
            raise RenderError(f"{path}: labels.includeSelectors: true is not implemented")
        if not isinstance(entry.get("pairs"), dict) or not entry["pairs"]:
            raise RenderError(f"{path}: labels entry needs a non-empty pairs mapping")
    return kust


def render(base: Path) -> list[dict]:
    kust = load_kustomization(base)
    namespace = kust.get("namespace")
    docs: list[dict] = []
    seen: set[tuple[str, str, str]] = set()
    for rel in kust.get("resources") or []:
        path = base / rel
        if not path.is_file():
            raise RenderError(f"resource {rel}: not a file in {base} (directories and remote bases are not implemented)")
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            if not isinstance(doc, dict) or "kind" not in doc or "metadata" not in doc:
                raise RenderError(f"resource {rel}: a document is not a Kubernetes object")
            kind = doc["kind"]
            meta = doc["metadata"]
            if namespace:
                if kind == "Namespace":
                    meta["name"] = namespace
                elif kind not in CLUSTER_SCOPED:
                    meta["namespace"] = namespace
            for entry in kust.get("labels") or []:
                pairs = {str(k): str(v) for k, v in entry["pairs"].items()}
                meta.setdefault("labels", {}).update(pairs)
                if entry.get("includeTemplates", False):
                    for tpath in TEMPLATE_LABEL_PATHS.get(kind, []):
                        _labels_at(doc, tpath).update(pairs)
            key = (kind, meta.get("namespace", ""), meta.get("name", ""))
            if key in seen:
                raise RenderError(f"resource {rel}: duplicate {kind}/{key[2]}")
            seen.add(key)
            docs.append(doc)
    if not docs:
        raise RenderError(f"{base}: kustomization lists no objects")
    return docs


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        docs = render(Path(argv[1]))
    except (RenderError, yaml.YAMLError, OSError) as err:
        print(f"render_kustomize: {err}", file=sys.stderr)
        return 1
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False, default_flow_style=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
