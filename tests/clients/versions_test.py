#!/usr/bin/env python3
"""Model versions with tritonclient, unchanged, over HTTP and gRPC (scripts/versions-test.sh
starts the node and lays out the repository: mlp/1, mlp/2, mlp/3 whose manifest says
version_policy = { latest = 2 }, each version's logits offset by its number; cnn in the
single-version layout).

    versions_test.py HTTP_HOST:PORT GRPC_HOST:PORT MODEL_REPOSITORY FERRYCTL SOCKET

Checks: a request without a version meets the newest, one with a version meets it, a version
not served is refused (404 / NOT_FOUND) as are versions that are not numbers; metadata,
ready, the repository index and statistics per version; per-version scheduler weights
(inherited and their own) and a reload; versions loaded and unloaded live with ferryctl (the
policy applied to a load of the model's name), a bundle turned into a versioned model, and
the repository extension's load of a versioned model.
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from checks import check, failures, refused

HTTP_ADDRESS = ""  # Set by main.
X = np.full((1, 784), 0.1, np.float32)


def infer_http(h, version=""):
    inp = httpclient.InferInput("input", [1, 784], "FP32")
    inp.set_data_from_numpy(X)
    r = h.infer("mlp", [inp], model_version=version)
    return r.get_response()["model_version"], r.as_numpy("logits")


def infer_grpc(g, version=""):
    inp = grpcclient.InferInput("input", [1, 784], "FP32")
    inp.set_data_from_numpy(X)
    r = g.infer("mlp", [inp], model_version=version, client_timeout=30)
    return r.get_response().model_version, r.as_numpy("logits")


def http_status(address, path, method="GET"):
    """The status and body of a raw HTTP request (tritonclient's is_model_ready hides which)."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request(method, path, body=b"{}" if method == "POST" else None)
    r = conn.getresponse()
    body = r.read().decode(errors="replace")
    conn.close()
    return r.status, body


def ctl(ferryctl, socket, *args):
    out = subprocess.run([ferryctl, "--socket", socket, "--json", *args], capture_output=True,
                         text=True, timeout=60)
    return out.returncode, out.stdout + out.stderr


def wait_for(cond, what, seconds=60):
    end = time.time() + seconds
    while time.time() < end:
        try:
            if cond():
                return True
        except Exception:  # A hook host restarting with the new table: try again.
            pass
        time.sleep(0.2)
    check(False, what)
    return False


def weights_of(ferryctl, socket):
    """{model key: [weight on each worker]} from ferryctl status."""
    code, text = ctl(ferryctl, socket, "status")
    out = {}

    def walk(x):
        if isinstance(x, dict):
            if "model" in x and "weight" in x and "effective_max_batch" in x:
                out.setdefault(x["model"], []).append(x["weight"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(json.loads(text))
    return out


def add_version(repo, version, offset_from):
    """Version `version` of mlp: a copy of version `offset_from` (same policy), logits offset
    by `version` (the script's layout: each version's fc3.bias raised by its number)."""
    src, dst = f"{repo}/mlp/{offset_from}", f"{repo}/mlp/{version}"
    shutil.copytree(src, dst)
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "..", "..", "scripts",
                                                 "lib", "offset_bias.py"),
                    f"{dst}/weights.safetensors", str(version - offset_from)], check=True)


def served(h, g):
    v3, y3 = infer_http(h)
    v2, y2 = infer_http(h, "2")
    check(v3 == "3", f"HTTP: no version -> the newest (3): {v3}")
    check(v2 == "2" and np.allclose(y3 - y2, 1, atol=1e-4), f"HTTP: version 2 ran 2's weights: {v2}")
    v, y = infer_grpc(g, "2")
    check(v == "2" and np.allclose(y, y2, atol=1e-5), f"gRPC: model_version 2 -> 2: {v}")
    v, y = infer_grpc(g)
    check(v == "3" and np.allclose(y, y3, atol=1e-5), f"gRPC: no version -> 3: {v}")
    for bad in ["1", "4", "02", "x", "-1", "99999999999999999999"]:
        r = refused(lambda: infer_http(h, bad))
        check(r.startswith("404") and "has no version" in r, f"HTTP: version {bad!r} 404: {r[:90]}")
        r = refused(lambda: infer_grpc(g, bad))
        check("NOT_FOUND" in r, f"gRPC: version {bad!r} NOT_FOUND: {r[:90]}")


def described(h, g, address):
    check(h.get_model_metadata("mlp")["versions"] == ["2", "3"], "HTTP metadata lists 2 and 3")
    check(h.get_model_metadata("mlp", "2")["versions"] == ["2", "3"], "HTTP metadata of version 2")
    check(list(g.get_model_metadata("mlp", "3").versions) == ["2", "3"], "gRPC metadata")
    check(h.is_model_ready("mlp", "2") and h.is_model_ready("mlp", "3"), "HTTP: 2 and 3 ready")
    status, body = http_status(address, "/v2/models/mlp/versions/1/ready")
    check(status == 404 and "has no version '1'" in body, f"HTTP: ready of 1 is 404: {status}")
    check(g.is_model_ready("mlp", "3"), "gRPC: version 3 ready")
    check("NOT_FOUND" in refused(lambda: g.is_model_ready("mlp", "1")), "gRPC: ready of 1 NOT_FOUND")
    index = h.get_model_repository_index()
    mlp = sorted(e["version"] for e in index if e["name"] == "mlp")
    check(mlp == ["2", "3"], f"repository index: mlp versions {mlp}")
    check(any(e["name"] == "cnn" and e["version"] == "1" for e in index), "index: cnn version 1")


def counted(h, g):
    stats = h.get_inference_statistics("mlp", "2")["model_stats"]
    check(len(stats) == 1 and stats[0]["version"] == "2", "HTTP stats of version 2")
    # Version 2 served one HTTP and one gRPC request above (the workers publish their counts
    # every few milliseconds: waited for).
    wait_for(lambda: h.get_inference_statistics("mlp", "2")["model_stats"][0]["inference_stats"]
             ["success"]["count"] == 2, f"version 2 counted 2: {stats}", 10)
    both = h.get_inference_statistics("mlp")["model_stats"]
    check(sorted(s["version"] for s in both) == ["2", "3"], "HTTP stats of every version")
    g_stats = g.get_inference_statistics("mlp", "3").model_stats
    check(len(g_stats) == 1 and g_stats[0].version == "3", f"gRPC stats of version 3: {g_stats}")
    wait_for(lambda: g.get_inference_statistics("mlp", "3").model_stats[0].inference_stats
             .success.count == 2, "version 3 counted 2 (gRPC)", 10)
    check("404" in refused(lambda: h.get_inference_statistics("mlp", "1")), "stats of 1: 404")


def reloaded(ferryctl, socket, node_file):
    """A reload changing the model's weight reaches the version without its own, not the other."""
    with open(node_file) as f:
        text = f.read()
    with open(node_file, "w") as f:
        f.write(text.replace("weight = 2.0", "weight = 5.0"))
    code, out = ctl(ferryctl, socket, "reload")
    check(code == 0, f"ferryctl reload: {out.strip()[:200]}")
    wait_for(lambda: weights_of(ferryctl, socket).get("mlp/2") == [5.0, 5.0],
             "reload: mlp/2 follows the model's weight (5)", 10)
    weights = weights_of(ferryctl, socket)
    check(weights.get("mlp/3") == [3.0, 3.0], f"reload: mlp/3 keeps its own: {weights}")


def live(h, g, repo, ferryctl, socket):
    add_version(repo, 4, 3)
    y3 = infer_http(h, "3")[1]
    code, text = ctl(ferryctl, socket, "load", "mlp")
    check(code == 0 and "mlp/4" in text and "mlp/2" in text, f"ferryctl load mlp: {text.strip()}")
    wait_for(lambda: infer_http(h)[0] == "4", "the newest version (4) served after the load")
    check(np.allclose(infer_http(h)[1] - y3, 1, atol=1e-4), "version 4 ran its own weights")
    wait_for(lambda: http_status(HTTP_ADDRESS, "/v2/models/mlp/versions/2/ready")[0] == 404,
             "version 2 left (latest 2: 3 and 4)")
    check(h.get_model_metadata("mlp")["versions"] == ["3", "4"], "metadata lists 3 and 4")
    code, text = ctl(ferryctl, socket, "load", "mlp")
    check(code != 0 and "already loaded" in text, "a second load changes nothing, refused")
    code, text = ctl(ferryctl, socket, "load", "mlp/2")
    check(code == 0, f"ferryctl load mlp/2 (one version, outside the policy): {text.strip()}")
    wait_for(lambda: infer_http(h, "2")[0] == "2", "version 2 served again")
    code, text = ctl(ferryctl, socket, "unload", "mlp/4")
    check(code == 0, "ferryctl unload mlp/4")
    wait_for(lambda: infer_grpc(g)[0] == "3", "with 4 gone, 3 is the newest")
    code, text = ctl(ferryctl, socket, "load", "mlp/9")
    check(code != 0 and "mlp/9" in text, f"a version that does not exist: {text.strip()[:100]}")
    code, text = ctl(ferryctl, socket, "load", "mlp/../cnn")
    check(code != 0, "a key that leaves its place is refused")
    code, text = ctl(ferryctl, socket, "unload", "mlp")
    check(code == 0, "ferryctl unload mlp: every version")
    wait_for(lambda: "404" in refused(lambda: infer_http(h)), "no version of mlp is served")
    # The repository extension's load of a versioned model: the policy's versions (3 and 4),
    # both served when it returns.
    h.load_model("mlp")
    check(infer_http(h)[0] == "4" and infer_http(h, "3")[0] == "3",
          "repository load of mlp: 3 and 4 served at once")
    check(h.get_model_metadata("mlp")["versions"] == ["3", "4"], "repository load: versions 3, 4")
    h.unload_model("mlp")
    check("404" in refused(lambda: infer_http(h, "3")), "repository unload of mlp: every version")


def converted(h, repo, ferryctl, socket):
    """A bundle turned into a versioned model: its plain entry leaves, its version 1 serves."""
    os.makedirs(f"{repo}/cnn/1")
    for f in ["manifest.toml", "weights.safetensors"]:
        os.rename(f"{repo}/cnn/{f}", f"{repo}/cnn/1/{f}")
    code, text = ctl(ferryctl, socket, "load", "cnn")
    check(code == 0 and '"cnn/1"' in text, f"ferryctl load cnn, now versioned: {text.strip()}")
    status, body = http_status(HTTP_ADDRESS, "/v2/models/cnn/versions/1/ready")
    check(status == 200, f"cnn version 1 ready after the load: {status} {body[:80]}")
    keys = weights_of(ferryctl, socket)
    check("cnn/1" in keys and "cnn" not in keys, f"the table holds cnn/1, not cnn: {keys}")


def main():
    http_address, grpc_address, repo, ferryctl, socket = sys.argv[1:6]
    global HTTP_ADDRESS
    HTTP_ADDRESS = http_address
    h = httpclient.InferenceServerClient(http_address)
    g = grpcclient.InferenceServerClient(grpc_address)
    served(h, g)
    described(h, g, http_address)
    counted(h, g)
    weights = weights_of(ferryctl, socket)
    check(weights.get("mlp/2") == [2.0, 2.0], f"mlp/2 inherits the model's weight 2: {weights}")
    check(weights.get("mlp/3") == [3.0, 3.0], f"mlp/3 has its own weight 3: {weights}")
    reloaded(ferryctl, socket, os.path.join(os.path.dirname(repo), "node.toml"))
    live(h, g, repo, ferryctl, socket)
    converted(h, repo, ferryctl, socket)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
