#!/usr/bin/env python3
"""The trace extension with tritonclient, unchanged, over HTTP and gRPC, and the spans a node
exports to an OTLP collector (scripts/trace-test.sh starts the node and the receiver).

    trace_test.py HTTP_HOST:PORT GRPC_HOST:PORT SPANS_FILE

Checks: Triton's settings read and changed (node-wide: another hook host sees the change);
sampled requests become a gateway span and pre/queue/compute/post children carrying the
client's W3C trace id and parent; trace_count bounds the traces; hostile settings refused.
"""
import json
import os
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from checks import check, failures, refused


def spans(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            target, body = line.split(" ", 1)
            for rs in json.loads(body)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    out.extend(ss["spans"])
    return out


def wait_for(path, trace_ids, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        got = [s for s in spans(path) if s["traceId"] in trace_ids]
        if len({s["traceId"] for s in got if s["name"] == "gateway"}) >= len(trace_ids):
            return got
        time.sleep(0.1)
    return [s for s in spans(path) if s["traceId"] in trace_ids]


def traceparent(i):
    return f"{i:032x}", f"{i + 0x1000:016x}", f"00-{i:032x}-{i + 0x1000:016x}-01"


def main():
    address, grpc_address, path = sys.argv[1:4]
    h = httpclient.InferenceServerClient(address)
    g = grpcclient.InferenceServerClient(grpc_address)
    x = np.full((1, 784), 0.1, np.float32)
    settings = h.get_trace_settings()
    check(settings.get("trace_level") == ["OFF"] and settings.get("trace_mode") == "opentelemetry",
          f"HTTP: the node starts with tracing off ({settings})")
    changed = h.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                                "trace_count": "4"})
    check(changed["trace_level"] == ["TIMESTAMPS"] and changed["trace_count"] == "4",
          f"HTTP: settings changed ({changed})")
    deadline = time.time() + 3
    seen = []
    while time.time() < deadline:
        seen = [httpclient.InferenceServerClient(address).get_trace_settings()["trace_level"]
                for _ in range(4)]
        if all(s == ["TIMESTAMPS"] for s in seen):
            break
        time.sleep(0.05)
    check(all(s == ["TIMESTAMPS"] for s in seen), f"every hook host has the change ({seen})")

    sent = {}
    for i in range(1, 7):
        trace, parent, header = traceparent(i)
        sent[trace] = parent
        inp = httpclient.InferInput("input", [1, 784], "FP32")
        inp.set_data_from_numpy(x)
        h.infer("mlp", [inp], headers={"traceparent": header})
    got = wait_for(path, set(list(sent)[:4]))
    gateways = [s for s in got if s["name"] == "gateway"]
    check(len(gateways) == 4, f"HTTP: trace_count 4 of 6 requests traced ({len(gateways)})")
    for gw in gateways:
        children = [s for s in got if s.get("parentSpanId") == gw["spanId"]]
        names = sorted(s["name"] for s in children)
        inside = all(int(gw["startTimeUnixNano"]) <= int(s["startTimeUnixNano"]) <=
                     int(s["endTimeUnixNano"]) <= int(gw["endTimeUnixNano"]) for s in children)
        check(gw.get("parentSpanId") == sent.get(gw["traceId"]) and
              names == ["compute", "post", "pre", "queue"] and inside,
              f"trace {gw['traceId'][-4:]}: the client's parent, four children inside the gateway span")
        check(any(a["key"] == "ferry.model" and a["value"].get("stringValue") == "mlp"
                  for a in gw["attributes"]), "the gateway span names the model")
    time.sleep(0.5)
    check(len({s["traceId"] for s in spans(path) if s["name"] == "gateway"}) == 4,
          "no trace past trace_count")
    after = h.get_trace_settings()
    check(after["trace_count"] == "0" and after["trace_level"] == ["OFF"],
          f"the count used up, tracing is off ({after})")

    # gRPC, unchanged tritonclient: read and change; its calls traced with their metadata.
    got_settings = g.get_trace_settings(as_json=True)
    check(got_settings["settings"]["trace_mode"]["value"] == ["opentelemetry"],
          f"gRPC: TraceSetting read ({got_settings})")
    g.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                      "trace_count": "2"})
    time.sleep(0.3)
    grpc_sent = {}
    for i in range(11, 14):
        trace, parent, header = traceparent(i)
        grpc_sent[trace] = parent
        inp = grpcclient.InferInput("input", [1, 784], "FP32")
        inp.set_data_from_numpy(x)
        g.infer("mlp", [inp], headers={"traceparent": header}, client_timeout=30)
    got = wait_for(path, set(list(grpc_sent)[:2]))
    traced = {s["traceId"] for s in got if s["name"] == "gateway"}
    check(traced == set(list(grpc_sent)[:2]), f"gRPC: 2 of 3 calls traced with their trace ids ({len(traced)})")

    # Hostile settings: refused by name, nothing changes.
    before = h.get_trace_settings()
    for bad, name in [({"trace_level": ["TENSORS"]}, "trace_level"), ({"trace_rate": "0"}, "trace_rate"),
                      ({"trace_rate": "-1"}, "trace_rate"), ({"trace_count": "1e9"}, "trace_count"),
                      ({"trace_file": "/tmp/x"}, "trace_file"), ({"bogus": "1"}, "bogus")]:
        check(refused(lambda: h.update_trace_settings(settings=bad), name) == name,
              f"HTTP: {bad} refused naming {name}")
        check(refused(lambda: g.update_trace_settings(settings=bad), "INVALID_ARGUMENT") == "INVALID_ARGUMENT",
              f"gRPC: {bad} refused")
    check(refused(lambda: h.update_trace_settings(model_name="mlp", settings={"trace_rate": "1"}), "400") == "400",
          "HTTP: per-model trace settings refused (the node's apply to every model)")
    check(refused(lambda: h.get_trace_settings(model_name="nosuch"), "404") == "404", "HTTP: an unknown model's settings 404")
    check(h.get_trace_settings() == before, "hostile settings changed nothing")
    metrics = sys.argv[4] if len(sys.argv) > 4 else ""
    if metrics:
        import urllib.request
        exported = 0.0
        deadline = time.time() + 5  # ferryd copies the exporter's counts each tick.
        while exported < 6 and time.time() < deadline:
            text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
            line = [l for l in text.splitlines()
                    if l.startswith('ferry_traced_requests_total{outcome="exported"}')]
            exported = float(line[0].split()[-1]) if line else 0.0
            time.sleep(0.1)
        check(exported == 6, f"metrics count the 6 exported traces ({exported})")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


main()
