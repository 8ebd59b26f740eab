#!/usr/bin/env python3
"""Merges ferry-gpu-bench and torch_bench JSON into the GPU check's final table:

    bench/gpu_table.py GPU.json TORCH.json
"""
import json
import sys

gpu = json.load(open(sys.argv[1]))
torch_rows = {(r["model"], r["batch"]): r for r in json.load(open(sys.argv[2]))["torch"]} if len(sys.argv) > 2 else {}
print(f"{'model':10s} {'batch':>5s} {'ferry us':>9s} {'ferry rows/s':>13s} {'torch us':>9s} "
      f"{'x torch':>8s} {'graph us':>9s} {'plain us':>9s} {'host us':>8s} {'gemm-only':>9s} {'x gemm':>7s}")
for r in gpu["dispatch"]:
    t = torch_rows.get((r["model"], r["batch"]))
    speedup = f"{t['eager_us'] / r['dispatch_us']:8.2f}" if t else f"{'-':>8s}"
    torch_us = f"{t['eager_us']:9.1f}" if t else f"{'-':>9s}"
    gemm = f"{r['gemm_only_us']:9.1f}" if "gemm_only_us" in r else f"{'-':>9s}"
    ratio = f"{r['dispatch_vs_gemm_only']:7.2f}" if "dispatch_vs_gemm_only" in r else f"{'-':>7s}"
    print(f"{r['model']:10s} {r['batch']:5d} {r['dispatch_us']:9.1f} {r['rows_per_s']:13.0f} {torch_us} "
          f"{speedup} {r['graph_us']:9.1f} {r['plain_us']:9.1f} {r['host_us']:8.1f} {gemm} {ratio}")
if gpu.get("upload"):
    print(f"weight upload ({gpu['upload']['model']}): {gpu['upload']['gb_per_s']:.1f} GB/s")
