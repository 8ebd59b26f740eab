#!/usr/bin/env python3
"""Where a ferry node's CPU goes per request, thread by thread (bench/cpu_profile.sh runs it).

  cpu_profile.py FERRYD_PID METRICS_ADDRESS OUT_JSON -- LOAD_COMMAND...

Reads every thread of ferryd and its descendants from /proc (CPU time, voluntary and
involuntary context switches), the machine's idle time from /proc/stat and the node's
batch metrics, runs LOAD_COMMAND (ferry-load with --json), reads them all again, and
divides each difference by the requests the workers executed in between (the
ferry_requests_total counters), so the figures do not depend on how long the load ran.
"""
import json
import os
import resource
import subprocess
import sys
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def descendants(root):
    """`root` and every process below it."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    return out


def read_threads(root):
    """{(process name, tid): (thread name, cpu seconds, voluntary, involuntary)}."""
    threads = {}
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/comm") as f:
                process = f.read().strip()
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # Exited meanwhile.
        for tid in tasks:
            base = f"/proc/{pid}/task/{tid}"
            try:
                with open(f"{base}/comm") as f:
                    name = f.read().strip()
                with open(f"{base}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                switches = {}
                with open(f"{base}/status") as f:
                    for line in f:
                        key, _, value = line.partition(":")
                        if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                            switches[key] = int(value)
            except OSError:
                continue
            # utime and stime are fields 14 and 15 of stat: 12 and 13 after the name.
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            name = "main" if tid == str(pid) else name
            threads[(process, int(tid))] = (name, cpu, switches["voluntary_ctxt_switches"],
                                            switches["nonvoluntary_ctxt_switches"])
    return threads


def read_idle():
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return values[3] + values[4], sum(values[:8])


def read_metrics(address):
    """The sums of the worker counters this report divides by."""
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    sums = {"requests": 0.0, "dispatches": 0.0, "padding": 0.0, "executed": 0.0, "sizes": {}}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, value = line.rsplit(" ", 1)
        family = series.split("{", 1)[0]
        if family == "ferry_requests_total":
            sums["requests"] += float(value)
        elif family == "ferry_dispatches_total":
            sums["dispatches"] += float(value)
        elif family == "ferry_padding_rows_total":
            sums["padding"] += float(value)
        elif family == "ferry_batch_size_sum":
            sums["executed"] += float(value)
        elif family == "ferry_batch_size_bucket":
            le = series.split('le="', 1)[1].split('"', 1)[0]
            sums["sizes"][le] = sums["sizes"].get(le, 0.0) + float(value)
    return sums


def main():
    split = sys.argv.index("--")
    ferryd, metrics, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    load = sys.argv[split + 1:]
    before, idle0, m0 = read_threads(ferryd), read_idle(), read_metrics(metrics)
    run = subprocess.run(load, stdout=subprocess.PIPE, check=True)
    after, idle1, m1 = read_threads(ferryd), read_idle(), read_metrics(metrics)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    levels = json.loads(run.stdout)["levels"]
    failed = [level for level in levels if level.get("errors")]
    if failed:
        sys.exit(f"the load had failed requests: {failed[0]['errors']}")
    requests = m1["requests"] - m0["requests"]
    if requests <= 0:
        sys.exit("no request was executed")
    per = 1e6 / requests
    processes, merged = {}, {}
    for key, (name, cpu, vol, invol) in after.items():
        _, cpu0, vol0, invol0 = before.get(key, (name, 0.0, 0, 0))  # New: counted whole.
        process = key[0]
        processes[process] = processes.get(process, 0.0) + (cpu - cpu0) * per
        # Threads of one name (hook threads, CPU pool threads) together.
        row = merged.setdefault((process, name), {
            "process": process, "thread": name, "threads": 0, "cpu_us_per_request": 0.0,
            "voluntary_switches_per_request": 0.0, "involuntary_switches_per_request": 0.0})
        row["threads"] += 1
        row["cpu_us_per_request"] += (cpu - cpu0) * per
        row["voluntary_switches_per_request"] += (vol - vol0) / requests
        row["involuntary_switches_per_request"] += (invol - invol0) / requests
    threads = sorted(merged.values(), key=lambda r: -r["cpu_us_per_request"])
    dispatches = m1["dispatches"] - m0["dispatches"]
    executed = m1["executed"] - m0["executed"]
    sizes = {le: m1["sizes"][le] - m0["sizes"].get(le, 0.0) for le in m1["sizes"]}
    report = {
        "load": levels,
        "requests": requests,
        "idle_share": (idle1[0] - idle0[0]) / max(1, idle1[1] - idle0[1]),
        "client_cpu_us_per_request": (usage.ru_utime + usage.ru_stime) * per,
        "server_cpu_us_per_request": sum(processes.values()),
        "processes": processes,
        "threads": threads,
        "batches": {
            "dispatches": dispatches,
            "requests_per_dispatch": requests / dispatches if dispatches else 0.0,
            "rows_executed_per_dispatch": executed / dispatches if dispatches else 0.0,
            "padding_share": (m1["padding"] - m0["padding"]) / executed if executed else 0.0,
            "dispatches_at_or_below_size": sizes,
        },
    }
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    level = levels[0]
    print(f"{level['throughput_rps']:.0f} req/s, p50 {level['latency_us_p50']:.0f} us, "
          f"{requests:.0f} requests; idle {report['idle_share']:.1%} of the machine")
    print(f"CPU per request: server {report['server_cpu_us_per_request']:.1f} us, "
          f"client {report['client_cpu_us_per_request']:.1f} us")
    for process, us in sorted(processes.items(), key=lambda p: -p[1]):
        print(f"  {process:16} {us:6.1f} us")
    print(f"  {'process':16} {'thread':16} {'us/req':>7} {'vol/req':>8} {'invol/req':>9}")
    for t in threads:
        if t["cpu_us_per_request"] >= 0.05 or t["voluntary_switches_per_request"] >= 0.01:
            print(f"  {t['process']:16} {t['thread']:16} {t['cpu_us_per_request']:7.1f} "
                  f"{t['voluntary_switches_per_request']:8.3f} "
                  f"{t['involuntary_switches_per_request']:9.3f}")
    b = report["batches"]
    print(f"batches: {b['dispatches']:.0f}, {b['requests_per_dispatch']:.1f} requests and "
          f"{b['rows_executed_per_dispatch']:.1f} rows executed each, "
          f"{b['padding_share']:.0%} of rows padding")


if __name__ == "__main__":
    main()
