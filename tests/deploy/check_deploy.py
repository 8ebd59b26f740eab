"""Checks deploy/ as far as a machine without a cluster or a container runtime can: every
Kubernetes document parses and carries the fields its kind requires; labels, selectors, ports
and probes agree with each other and with ferry (probe paths it serves, the grace period
against the ConfigMap's drain times); the ConfigMap's node file and the KServe entry point's
pass `ferryd --check` (devices replaced with cpu:1: no GPU here); the Containerfile installs
the package and runs as the user the pods name.
    python3 tests/deploy/check_deploy.py BUILD_DIR"""
import os
import subprocess
import sys
import tempfile
import tomllib

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
KUBE = os.path.join(ROOT, "deploy", "kubernetes")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def get(doc, path, default=None):
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return default
        doc = doc[key]
    return doc


REQUIRED = {  # kind -> (apiVersion, fields every such object needs)
    "ConfigMap": ("v1", ["data"]),
    "DaemonSet": ("apps/v1", ["spec.selector.matchLabels", "spec.template.metadata.labels",
                              "spec.template.spec.containers"]),
    "Service": ("v1", ["spec.selector", "spec.ports"]),
    "PodDisruptionBudget": ("policy/v1", ["spec.selector.matchLabels"]),
    "ServingRuntime": ("serving.kserve.io/v1alpha1", ["spec.supportedModelFormats",
                                                      "spec.containers", "spec.protocolVersions"]),
    "ServiceMonitor": ("monitoring.coreos.com/v1", ["spec.selector.matchLabels", "spec.endpoints"]),
}


def ferryd_check(build, node_toml, what):
    text = node_toml.replace('devices = "all"', 'devices = "cpu:1"')
    with tempfile.TemporaryDirectory() as d:
        repo = os.path.join(d, "models")
        os.mkdir(repo)
        parsed = tomllib.loads(text)
        text = text.replace(parsed["node"]["model_repository"], repo)
        path = os.path.join(d, "node.toml")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([os.path.join(build, "supervisor", "ferryd"), "--check", "--config", path],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"{what} passes ferryd --check ({(r.stdout + r.stderr).strip()[:200]})")


def alert_metrics(operations, metrics):
    """Every metric the alerts table of docs/operations.md uses is one docs/metrics.md lists."""
    import re
    with open(operations) as f:
        text = f.read()
    table = text[text.index("## Alerts worth setting"):text.index("## Containers")]
    with open(metrics) as f:
        listed = set(re.findall(r"`(ferry_[a-z_]+)", f.read()))
    used = set(re.findall(r"(ferry_[a-z_]+?)(?:_bucket)?[\[{ ]", table))
    check(used and used <= listed, f"the alerts use metrics docs/metrics.md lists ({sorted(used - listed)} missing)")


def main():
    build = os.path.realpath(sys.argv[1])
    docs = {}
    for name in sorted(os.listdir(KUBE)):
        with open(os.path.join(KUBE, name)) as f:
            for doc in yaml.safe_load_all(f):
                kind = doc.get("kind")
                check(kind in REQUIRED, f"{name}: kind {kind} is one this checker knows")
                if kind not in REQUIRED:
                    continue
                api, fields = REQUIRED[kind]
                check(doc.get("apiVersion") == api, f"{name}: apiVersion {api}")
                check(bool(get(doc, "metadata.name")), f"{name}: metadata.name")
                for field in fields:
                    check(get(doc, field) is not None, f"{name}: {field}")
                docs[kind] = doc
    ds, svc, cm = docs["DaemonSet"], docs["Service"], docs["ConfigMap"]
    labels = get(ds, "spec.template.metadata.labels")
    selects = lambda selector: all(labels.get(k) == v for k, v in selector.items())
    check(selects(get(ds, "spec.selector.matchLabels")), "DaemonSet: its selector matches its pods")
    check(selects(get(svc, "spec.selector")), "Service: selects the DaemonSet's pods")
    check(selects(get(docs["PodDisruptionBudget"], "spec.selector.matchLabels")), "PDB: selects the pods")
    check(all(svc["metadata"]["labels"].get(k) == v for k, v in
              get(docs["ServiceMonitor"], "spec.selector.matchLabels").items()),
          "ServiceMonitor: selects the Service")
    container = get(ds, "spec.template.spec.containers")[0]
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    for p in svc["spec"]["ports"]:
        check(p["targetPort"] in port_names, f"Service port {p['name']} targets a container port")
    check(any(e["port"] in [p["name"] for p in svc["spec"]["ports"]] for e in docs["ServiceMonitor"]["spec"]["endpoints"]),
          "ServiceMonitor: scrapes a port the Service has")
    node = tomllib.loads(cm["data"]["node.toml"])
    listen = node["node"]["listen"]
    for name, key in (("http", "http"), ("grpc", "grpc"), ("metrics", "metrics"), ("agent", "agent")):
        check(listen[key].endswith(":" + str(port_names[name])), f"the node listens for {name} on the port the pod declares")
    check(container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready", "readiness probe: /v2/health/ready")
    check(container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live", "liveness probe: /v2/health/live")
    drain = node["supervisor"].get("drain_notice_seconds", 0) + node["supervisor"].get("drain_timeout_seconds", 30)
    grace = get(ds, "spec.template.spec.terminationGracePeriodSeconds")
    check(grace is not None and grace > drain, f"grace period {grace} s outlasts the drain ({drain} s)")
    check(node["supervisor"].get("drain_notice_seconds", 0) >= 2 * container["readinessProbe"]["periodSeconds"],
          "the drain notice outlasts two readiness probes")
    check(node["supervisor"]["control_socket"] in " ".join(container["lifecycle"]["preStop"]["exec"]["command"]),
          "preStop drains through the node's control socket")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    check({"/dev/shm", "/etc/ferry", os.path.dirname(node["supervisor"]["control_socket"]),
           node["node"]["model_repository"]} <= mounts, "the pod mounts /dev/shm, the config, the socket's directory and the models")
    shm = next(v for v in get(ds, "spec.template.spec.volumes") if v["name"] == "shm")
    check(shm["emptyDir"].get("medium") == "Memory", "/dev/shm is memory-backed")
    check(get(ds, "spec.template.spec.securityContext.runAsNonRoot") is True, "pods run as non-root")
    check("nvidia.com/gpu" in container["resources"]["limits"], "the pod asks for GPUs")
    ferryd_check(build, cm["data"]["node.toml"], "the ConfigMap's node file")
    sr = docs["ServingRuntime"]
    check(set(sr["spec"]["protocolVersions"]) <= {"v1", "v2", "grpc-v2"}, "ServingRuntime: known protocol versions")
    entry = os.path.join(ROOT, "deploy", "kserve-entrypoint.sh")
    out = subprocess.run(["sh", entry, "--print-config", "/mnt/models"], capture_output=True, text=True,
                         env={**os.environ, "FERRY_CONFIG_OUT": os.path.join(tempfile.mkdtemp(), "node.toml")})
    check(out.returncode == 0, "the KServe entry point writes a node file")
    ferryd_check(build, out.stdout, "the KServe entry point's node file")
    served = tomllib.loads(out.stdout)["node"]["listen"]["http"].rsplit(":", 1)[1]
    check([p["containerPort"] for p in sr["spec"]["containers"][0]["ports"]] == [int(served)],
          "ServingRuntime: the port the entry point serves HTTP on")
    with open(os.path.join(ROOT, "deploy", "Containerfile")) as f:
        cf = f.read()
    check("apt-get install" in cf and "ferry_*_amd64.deb" in cf, "Containerfile installs ferry's package")
    uid = get(ds, "spec.template.spec.securityContext.runAsUser")
    check(f"--uid {uid}" in cf and f"USER {uid}:" in cf, f"Containerfile makes and runs as uid {uid}, the pods' runAsUser")
    check("kserve-entrypoint.sh" in cf, "Containerfile carries the KServe entry point")
    alert_metrics(os.path.join(ROOT, "docs", "operations.md"), os.path.join(ROOT, "docs", "metrics.md"))
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all deploy checks passed")


main()
