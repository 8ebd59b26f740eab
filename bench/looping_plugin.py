"""What a looping plugin costs the other models (bench/looping_plugin.sh runs it).

Client threads send the MLP's reference input over HTTP in a closed loop for --seconds (the
baseline), then again for --seconds while one more thread calls the model whose plugin spins
forever in every call (one call at a time, --attack-pause seconds apart). Prints JSON: good answers per second in each phase and their ratio
(attack / baseline), the attacker's answers by kind, and ferryd's failed_plugins.

  looping_plugin.py HTTP_ADDRESS CTL_SOCKET FERRYCTL [--seconds 20] [--threads 4]
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "soak"))
from chaos_soak import read_safetensors, ROOT  # noqa: E402


def serve(address, x, want, stop, counts, lock):
    client = httpclient.InferenceServerClient(address, network_timeout=30)
    while not stop.is_set():
        tensor = httpclient.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        try:
            got = client.infer("mlp", [tensor]).as_numpy("logits")
            key = "good" if float(np.abs(got - want).max()) < 1e-4 else "wrong"
        except Exception:  # A connection closed by a restarting hook host.
            key = "failed"
            client.close()
            client = httpclient.InferenceServerClient(address, network_timeout=30)
        with lock:
            counts[key] = counts.get(key, 0) + 1


def attack(address, stop, counts, lock, pause):
    client = httpclient.InferenceServerClient(address, network_timeout=30)
    x = np.zeros((1, 784), np.float32)
    while not stop.is_set():
        tensor = httpclient.InferInput("input", [1, 784], "FP32")
        tensor.set_data_from_numpy(x)
        try:
            client.infer("spin", [tensor])
            key = "answered"
        except InferenceServerException as e:
            key = "marked failed" if "marked failed" in str(e) else str(e.status())
        except Exception:
            key = "connection"
            client.close()
            client = httpclient.InferenceServerClient(address, network_timeout=30)
        with lock:
            counts[key] = counts.get(key, 0) + 1
        stop.wait(pause)


def phase(args, x, want, with_attack):
    stop, lock = threading.Event(), threading.Lock()
    counts, attacker = {}, {}
    threads = [threading.Thread(target=serve, args=(args.address, x, want, stop, counts, lock))
               for _ in range(args.threads)]
    if with_attack:
        threads.append(threading.Thread(target=attack, args=(args.address, stop, attacker, lock,
                                                               args.attack_pause)))
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    return counts, attacker


def main():
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("socket")
    p.add_argument("ferryctl")
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--threads", type=int, default=4)
    # Between the attacker's calls: its refusals, once the plugin is marked failed, are cheap
    # but not free, and a flood of them measures the front end, not the looping plugin.
    p.add_argument("--attack-pause", type=float, default=0.1)
    args = p.parse_args()
    ref = read_safetensors(os.path.join(ROOT, "tests", "data", "reference",
                                        "mlp-default-b1.safetensors"))
    x, want = ref["input.input"], ref["output.logits"]
    base, _ = phase(args, x, want, False)
    hit, attacker = phase(args, x, want, True)
    status = json.loads(subprocess.run([args.ferryctl, "--socket", args.socket, "--json",
                                        "status"], capture_output=True, text=True).stdout)
    base_rate = base.get("good", 0) / args.seconds
    hit_rate = hit.get("good", 0) / args.seconds
    print(json.dumps({
        "seconds_per_phase": args.seconds, "threads": args.threads,
        "baseline_per_s": round(base_rate, 1), "with_looping_plugin_per_s": round(hit_rate, 1),
        "ratio": round(hit_rate / max(base_rate, 1e-9), 3),
        "baseline": base, "with_looping_plugin": hit, "attacker": attacker,
        "failed_plugins": status.get("failed_plugins"),
        "hookhost_restarts": sum(c["restarts"] for c in status["children"]
                                 if c["kind"] == "hookhost"),
    }, indent=1))


if __name__ == "__main__":
    main()
