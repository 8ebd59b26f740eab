"""Idle-connection floods against a node, and whether a normal client is still served
(bench/connection_flood.sh runs it).

For each flood (N idle TCP connections to the gRPC port, or to the HTTP port, opened and kept
by this process, which sends nothing on them) a normal client then makes --requests calls,
each on a new connection (the worst case: it must get in), over HTTP and gRPC, and the flood
is kept open meanwhile. Prints JSON per flood: connections the node kept open, calls served,
their latency (median, max).

  connection_flood.py HTTP_ADDRESS GRPC_ADDRESS [--grpc-idle 8400] [--http-idle 2000]
"""
import argparse
import json
import resource
import socket
import statistics
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def open_idle(address, count):
    host, port = address.rsplit(":", 1)
    sockets = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect((host, int(port)))
        except BlockingIOError:
            pass
        sockets.append(s)
        if len(sockets) % 500 == 0:
            time.sleep(0.05)  # Let the node's accept threads keep up.
    return sockets


def still_open(sockets):
    """Connections the node has not closed (held, or still in its listen backlog)."""
    alive = 0
    for s in sockets:
        try:
            data = s.recv(65536)
            alive += 1 if data else 0
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def normal_client(http_address, grpc_address, requests):
    x = np.zeros((1, 784), np.float32)
    served, latencies = {"http": 0, "grpc": 0}, []
    for i in range(requests):
        for kind in ("http", "grpc"):
            start = time.monotonic()
            try:
                if kind == "http":
                    c = httpclient.InferenceServerClient(http_address, network_timeout=10,
                                                         connection_timeout=10)
                    t = httpclient.InferInput("input", [1, 784], "FP32")
                else:
                    c = grpcclient.InferenceServerClient(grpc_address)
                    t = grpcclient.InferInput("input", [1, 784], "FP32")
                t.set_data_from_numpy(x)
                if kind == "http":
                    c.infer("mlp", [t])
                else:
                    c.infer("mlp", [t], client_timeout=10)
                served[kind] += 1
                latencies.append(time.monotonic() - start)
            except Exception:
                pass
            finally:
                c.close()
    return served, latencies


def main():
    p = argparse.ArgumentParser()
    p.add_argument("http")
    p.add_argument("grpc")
    p.add_argument("--grpc-idle", type=int, default=8400)
    p.add_argument("--http-idle", type=int, default=2000)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--settle", type=float, default=2.0)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    report = []
    for name, address, count in (("idle gRPC connections", args.grpc, args.grpc_idle),
                                 ("idle HTTP connections", args.http, args.http_idle)):
        flood = open_idle(address, count)
        time.sleep(args.settle)  # Accepted, counted, and idle past the eviction age.
        kept = still_open(flood)
        served, latencies = normal_client(args.http, args.grpc, args.requests)
        report.append({
            "flood": name, "opened": count, "not_closed_by_node": kept,
            "requests_each": args.requests, "served": served,
            "latency_median_ms": round(statistics.median(latencies) * 1e3, 2) if latencies else None,
            "latency_max_ms": round(max(latencies) * 1e3, 2) if latencies else None,
        })
        for s in flood:
            s.close()
        time.sleep(1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
