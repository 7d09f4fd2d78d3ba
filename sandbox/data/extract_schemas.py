#!/usr/bin/env python3
"""Extract the built-in schemas the sandbox serves from kubernetes-validate's _definitions.json.

Usage: python3 extract_schemas.py PATH/TO/_definitions.json > k8s-v1.33-definitions.json
See PROVENANCE.md. The output keeps every definition reachable (by $ref) from the kinds below.
"""
import json
import sys

KINDS = {
    ("", "v1"): ["Namespace", "ConfigMap", "Secret", "ServiceAccount", "Service", "Endpoints", "Pod", "Node",
                  "PersistentVolumeClaim", "PersistentVolume", "ResourceQuota", "Event"],
    ("events.k8s.io", "v1"): ["Event"],
    ("apps", "v1"): ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ControllerRevision"],
    ("batch", "v1"): ["Job", "CronJob"],
    ("networking.k8s.io", "v1"): ["Ingress"],
    ("rbac.authorization.k8s.io", "v1"): ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"],
    ("admissionregistration.k8s.io", "v1"): ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"],
    ("apiextensions.k8s.io", "v1"): ["CustomResourceDefinition"],
    ("coordination.k8s.io", "v1"): ["Lease"],
    ("authorization.k8s.io", "v1"): ["SelfSubjectAccessReview", "SubjectAccessReview"],
    ("authentication.k8s.io", "v1"): ["SelfSubjectReview"],
    ("autoscaling", "v1"): ["Scale"],
}
EXTRA = [
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
]


def main():
    src = json.load(open(sys.argv[1]))
    defs = src["$defs"]
    wanted = {(g, v, k) for (g, v), ks in KINDS.items() for k in ks}
    roots = list(EXTRA)
    for name, d in defs.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            if (gvk["group"], gvk["version"], gvk["kind"]) in wanted or \
               (gvk["group"], gvk["version"], gvk["kind"].removesuffix("List")) in wanted:
                roots.append(name)
    out = {}

    def walk(v):
        if isinstance(v, dict):
            for key, x in v.items():
                if key == "$ref" and isinstance(x, str):
                    visit(x.split("/")[-1])
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    def visit(name):
        if name in out:
            return
        out[name] = defs[name]
        walk(defs[name])

    for r in roots:
        visit(r)
    json.dump({"$defs": dict(sorted(out.items()))}, sys.stdout, indent=None, separators=(",", ":"), sort_keys=False)


if __name__ == "__main__":
    main()
