#!/usr/bin/env python3
"""Mutation testing of one module against its tests (docs/testing.md). Not run by CI.

    scripts/mutate.py MODULE [--per-file N] [--seed S] [--build DIR] [--list]

For each source file of MODULE, universalmutator generates every mutant its C++ rules give
(one realistic change each: a comparison flipped, a condition negated, a statement deleted, a
constant changed, ...); a random sample of N per file (fixed seed: the same sample every run)
is applied one at a time; the module's test binaries are rebuilt and run. A mutant that does
not compile is not counted; one the tests fail on (or time out on) is killed; one they pass
is a survivor, printed with its line. The score is killed / (killed + survivors).
Results: DIR/mutants/MODULE/{killed,survived,invalid}.txt.
"""
import argparse
import difflib
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Sources, the ninja targets of their tests, and the CTest names that run them.
MODULES = {
    "descriptor": (["shm/descriptor.cc"], ["descriptor_test"], "^descriptor_test$"),
    "ring": (["shm/ring.cc", "shm/recovery.cc"], ["ring_test", "segment_test"],
             "^(ring_test|segment_test)$"),
    "config": (["config/node_config.cc"], ["node_config_test", "ferryctl"],
               "^(node_config_test|ferryctl_.*)$"),
    "toml_reader": (["config/toml_reader.cc"],
                    ["toml_reader_test", "node_config_test", "manifest_test", "ferryctl"],
                    "^(toml_reader_test|node_config_test|manifest_test|ferryctl_.*)$"),
    "safetensors": (["model/safetensors.cc"], ["safetensors_test", "hostile_input_test"],
                    "^(safetensors_test|hostile_input_test)$"),
    "manifest": (["model/manifest.cc"], ["manifest_test", "bundle_test", "hostile_input_test"],
                 "^(manifest_test|bundle_test|hostile_input_test)$"),
    "shape_inference": (["model/shape_inference.cc"],
                        ["shape_inference_test", "manifest_test", "bundle_test"],
                        "^(shape_inference_test|manifest_test|bundle_test)$"),
    "backend": (["worker/backends/backend.cc"], ["validate_job_test"], "^validate_job_test$"),
    "weight_cache": (["worker/backends/weight_cache.cc"], ["weight_cache_test"], "^weight_cache_test$"),
}


def run(cmd, timeout=None, cwd=ROOT):
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                              shell=isinstance(cmd, str)).returncode
    except subprocess.TimeoutExpired:
        return "timeout"


def mutants_of(source, work, mutate):
    """Every mutant of `source`, generated again whenever the source changed."""
    out = os.path.join(work, "generated", os.path.basename(source))
    digest = hashlib.sha256(open(os.path.join(ROOT, source), "rb").read()).hexdigest()
    stamp = os.path.join(work, "generated", os.path.basename(source) + ".sha256")
    if not os.path.exists(stamp) or open(stamp).read() != digest:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        subprocess.run([mutate, os.path.join(ROOT, source), "--noCheck", "--mutantDir", out],
                       capture_output=True, text=True, check=True)
        with open(stamp, "w") as f:
            f.write(digest)
    return sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".cc"))


def changed_line(original, mutant):
    """'line N: new text' for a replaced line, 'after line N: new text' for an insertion,
    and whether the original line was only a comment (such mutants are not counted)."""
    lines = original.splitlines()
    for line in difflib.unified_diff(lines, mutant.splitlines(), n=0, lineterm=""):
        if line.startswith("@@"):
            start, _, count = line.split()[1].lstrip("-").partition(",")
            number, inserted = int(start), count == "0"
        elif line.startswith("+") and not line.startswith("+++"):
            old = "" if inserted else lines[number - 1].strip()
            where = f"after line {number}" if inserted else f"line {number}"
            return f"{where}: {line[1:].strip()}", old.startswith("//") or old.startswith("/*")
    return "?", False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("module", choices=sorted(MODULES))
    parser.add_argument("--per-file", type=int, default=40)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--build", default=os.path.join(ROOT, "build-mutate"))
    parser.add_argument("--timeout", type=int, default=20,
                        help="seconds per test (the unmutated tests take a few)")
    args = parser.parse_args()
    # A stop (SIGTERM, SIGINT) still restores the source being mutated (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("mutate.py: stopped"))

    sources, targets, tests = MODULES[args.module]
    mutate = shutil.which("mutate")
    if mutate is None:
        sys.exit("mutate.py: universalmutator's `mutate` is not on PATH (scripts/mutate.sh installs it)")
    work = os.path.join(args.build, "mutants", args.module)
    os.makedirs(work, exist_ok=True)
    if run(["ninja", "-C", args.build] + targets) != 0:
        sys.exit("mutate.py: the unmutated module does not build")
    if run(["ctest", "--test-dir", args.build, "-R", tests], timeout=600) != 0:
        sys.exit("mutate.py: the unmutated module's tests fail")

    results = {"killed": [], "survived": [], "invalid": []}
    rng = random.Random(args.seed)
    for source in sources:
        path = os.path.join(ROOT, source)
        original = open(path).read()
        candidates = mutants_of(source, work, mutate)
        sample = sorted(rng.sample(candidates, min(args.per_file, len(candidates))))
        try:
            for i, mutant in enumerate(sample):
                text = open(mutant).read()
                where, in_comment = changed_line(original, text)
                what = f"{source} {where}"
                if in_comment:
                    print(f"[{i + 1}/{len(sample)}] comment  {what}", flush=True)
                    continue
                shutil.copyfile(mutant, path)
                start = time.time()
                if run(["ninja", "-C", args.build] + targets) != 0:
                    verdict = "invalid"
                else:
                    rc = run(["ctest", "--test-dir", args.build, "-R", tests, "--timeout",
                              str(args.timeout)], timeout=600)
                    verdict = "survived" if rc == 0 else "killed"
                results[verdict].append(what)
                print(f"[{i + 1}/{len(sample)}] {verdict:8} {time.time() - start:5.1f}s {what}",
                      flush=True)
        finally:
            with open(path, "w") as f:
                f.write(original)
    run(["ninja", "-C", args.build] + targets)
    for verdict, items in results.items():
        with open(os.path.join(work, f"{verdict}.txt"), "w") as f:
            f.write("\n".join(items) + ("\n" if items else ""))
    counted = len(results["killed"]) + len(results["survived"])
    score = len(results["killed"]) / counted if counted else 0.0
    print(f"\n{args.module}: {len(results['killed'])} killed, {len(results['survived'])} survived, "
          f"{len(results['invalid'])} did not compile; score {score:.0%}")
    for what in results["survived"]:
        print("  survived: " + what)


if __name__ == "__main__":
    main()
