"""A gzip compression bomb against a node (bench/gzip_bomb.sh runs it): a 784-float KServe
JSON request padded with zeros to 63 MiB, gzip-compressed (about 62 KB), as issue 33 measured.

1. The bomb alone, --bombs times: its answer and the hook hosts' CPU time it cost (their
   utime + stime from /proc, before and after, over the bombs sent).
2. A normal client (one 784-float JSON request at a time, keep-alive) for --seconds alone,
   then for --seconds while four clients send the bomb in a loop: its latency p50 / p99 /
   max in each phase.
Prints JSON.

  gzip_bomb.py HTTP_ADDRESS HOOKHOST_PID[,PID...] [--bombs 20] [--seconds 10]
"""
import argparse
import gzip
import http.client
import json
import os
import threading
import time


def bomb_body():
    head = b'{"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":['
    zeros = b"0," * ((63 << 20) // 2)
    return gzip.compress(head + zeros + b'0]}]}', compresslevel=9)


def normal_body():
    data = ",".join(str((i % 7) * 0.25) for i in range(784))
    return ('{"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[' + data +
            ']}]}').encode()


def post(conn, body, gz):
    headers = {"Content-Type": "application/json"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    conn.request("POST", "/v2/models/mlp/infer", body=body, headers=headers)
    r = conn.getresponse()
    r.read()
    return r.status


def cpu_seconds(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def connect(address):
    host, port = address.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=30)


def latencies(address, seconds):
    body = normal_body()
    conn = connect(address)
    out = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        start = time.monotonic()
        status = post(conn, body, False)
        if status != 200:
            raise SystemExit(f"the normal request was answered {status}")
        out.append(time.monotonic() - start)
    out.sort()
    pick = lambda q: round(out[min(len(out) - 1, int(q * len(out)))] * 1e3, 2)  # noqa: E731
    return {"requests": len(out), "p50_ms": pick(0.5), "p99_ms": pick(0.99),
            "max_ms": round(out[-1] * 1e3, 2)}


def bomb_loop(address, body, stop, statuses):
    conn = connect(address)
    while not stop.is_set():
        try:
            statuses.append(post(conn, body, True))
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = connect(address)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("pids")
    p.add_argument("--bombs", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10)
    args = p.parse_args()
    pids = [int(x) for x in args.pids.split(",")]
    body = bomb_body()
    conn = connect(args.address)
    before = cpu_seconds(pids)
    statuses = [post(conn, body, True) for _ in range(args.bombs)]
    cpu = cpu_seconds(pids) - before
    alone = latencies(args.address, args.seconds)
    stop, looped = threading.Event(), []
    attackers = [threading.Thread(target=bomb_loop, args=(args.address, body, stop, looped))
                 for _ in range(4)]
    for t in attackers:
        t.start()
    attacked = latencies(args.address, args.seconds)
    stop.set()
    for t in attackers:
        t.join()
    print(json.dumps({
        "bomb_compressed_bytes": len(body), "bomb_json_bytes": (63 << 20) + 80,
        "bomb_statuses": sorted(set(statuses)),
        "hookhost_cpu_ms_per_bomb": round(cpu / args.bombs * 1e3, 2),
        "normal_alone": alone, "normal_with_4_bomb_loops": attacked,
        "bombs_answered_while_looping": len(looped),
    }, indent=1))


if __name__ == "__main__":
    main()
