"""What the client tests share: a check that records a failure and goes on, and the outcome of
a call that should be refused. Each test ends with `sys.exit(1 if failures else 0)`.
"""
import re

from tritonclient.utils import InferenceServerException

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def refused(call, want=None):
    """"served" when `call` succeeds; else `want` when its status and message hold it, or the
    status and message themselves."""
    try:
        call()
        return "served"
    except InferenceServerException as e:
        text = f"{e.status()} {e.message()}"
        return want if want is not None and want in text else text


def metric_sum(text, name, **labels):
    """The sum of Prometheus samples `name` in `text` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', line[:line.index("}")]))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total
