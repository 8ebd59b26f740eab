#!/usr/bin/env python3
"""The report of bench/vs_triton.sh: every level of every round, each round's ratios
(ferry / Triton) per encoding and their medians, as a table and as JSON.

    vs_triton_report.py DIR ROUNDS OUT_JSON

DIR holds rR_SERVER_ENCODING.json (closed loop at 1, 8, 32 in flight) and
rR_SERVER_ENCODING_rate.json (open loop at 80% of Triton's peak) from ferry-load --json.
A level with failed requests is reported and makes the script exit 1: its figures would
measure nothing.
"""
import json
import statistics
import sys

ENCODINGS = ("binary", "json", "grpc")
SERVERS = ("triton", "ferry")


def load(d, rnd, server, encoding, rate=False):
    suffix = "_rate" if rate else ""
    return json.load(open(f"{d}/r{rnd}_{server}_{encoding}{suffix}.json"))["levels"]


def ratios(d, rnd, encoding):
    t, f = load(d, rnd, "triton", encoding), load(d, rnd, "ferry", encoding)
    tr, fr = load(d, rnd, "triton", encoding, True)[0], load(d, rnd, "ferry", encoding, True)[0]
    return {
        "throughput_at_1": f[0]["throughput_rps"] / t[0]["throughput_rps"],
        "throughput_at_32": f[2]["throughput_rps"] / t[2]["throughput_rps"],
        "p99_at_32": f[2]["latency_us_p99"] / t[2]["latency_us_p99"],
        "p99_at_equal_rate": fr["latency_us_p99"] / tr["latency_us_p99"],
        "offered_rate": tr["offered"],
    }


def main():
    d, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    failed = 0
    print(f"{'round':<6}{'encoding':<9}{'server':<8}{'level':<12}{'req/s':>9}{'p50 us':>9}"
          f"{'p99 us':>9}{'overhead p50':>14}{'errors':>8}")
    for rnd in range(1, rounds + 1):
        for encoding in ENCODINGS:
            for server in SERVERS:
                for l in load(d, rnd, server, encoding) + load(d, rnd, server, encoding, True):
                    level = ("rate " if l["mode"] == "rate" else "conc ") + str(int(l["offered"]))
                    errors = sum(l["errors"].values())
                    failed += errors
                    overhead = str(int(l["overhead_us_p50"])) if "overhead_us_p50" in l else "-"
                    print(f"{rnd:<6}{encoding:<9}{server:<8}{level:<12}{l['throughput_rps']:>9.0f}"
                          f"{l['latency_us_p50']:>9.0f}{l['latency_us_p99']:>9.0f}{overhead:>14}"
                          f"{errors:>8}")
    per_round = {e: [ratios(d, r, e) for r in range(1, rounds + 1)] for e in ENCODINGS}
    medians = {e: {k: statistics.median(x[k] for x in rs) for k in rs[0]}
               for e, rs in per_round.items()}
    print("\nferry / Triton, each round, then the median:")
    for e in ENCODINGS:
        for k in ("throughput_at_1", "throughput_at_32", "p99_at_32", "p99_at_equal_rate"):
            each = ", ".join(f"{x[k]:.2f}" for x in per_round[e])
            print(f"  {e:<7}{k:<19}{each}  median {medians[e][k]:.2f}")
    results = {f"r{r}_{s}_{e}{x}": json.load(open(f"{d}/r{r}_{s}_{e}{x}.json"))
               for r in range(1, rounds + 1) for s in SERVERS for e in ENCODINGS
               for x in ("", "_rate")}
    summary = {"rounds": rounds, "per_round": per_round, "medians": medians}
    print(json.dumps({"medians": medians}))
    json.dump({"results": results, "summary": summary}, open(out, "w"), indent=1)
    if failed:
        print(f"{failed} request(s) failed: nothing measured")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
