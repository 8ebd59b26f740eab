#!/usr/bin/env python3
"""The system shared-memory extension with tritonclient, unchanged, over HTTP and gRPC
(scripts/shm-test.sh starts the node: the example MLP, two hook hosts,
[frontend] system_shared_memory = true).

    shm_test.py HTTP_HOST:PORT GRPC_HOST:PORT

Checks: register / status / infer with input and output in shared memory / unregister over
both protocols, the answers equal to the same request sent as binary tensors; regions are the
node's (registered over HTTP, used over gRPC, whichever hook host each connection reaches);
hostile use refused by name: a place past its region, a wrong byte size, a region not
registered or unregistered, a region truncated after registration, keys that are not plain
shared-memory names or are ferry's own, a FIFO, a name taken twice; CUDA shared memory
refused with its message.
"""
import base64
import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from checks import check, failures, refused

RNG = np.random.default_rng(11)
TAG = f"shmtest{os.getpid()}"
ROWS = 3
IN_BYTES = ROWS * 784 * 4
OUT_BYTES = ROWS * 10 * 4


def reference(client, x):
    """The MLP's answer for `x` sent as binary tensors."""
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    return client.infer("mlp", [inp]).as_numpy("logits")


class Regions:
    """An input and an output region made with tritonclient's own helpers."""

    def __init__(self, suffix):
        self.names = (f"in_{suffix}", f"out_{suffix}")
        self.keys = (f"/{TAG}_in_{suffix}", f"/{TAG}_out_{suffix}")
        self.handles = [shm.create_shared_memory_region(n, k, size)
                        for n, k, size in zip(self.names, self.keys, (IN_BYTES, OUT_BYTES))]

    def register(self, client):
        client.register_system_shared_memory(self.names[0], self.keys[0], IN_BYTES)
        client.register_system_shared_memory(self.names[1], self.keys[1], OUT_BYTES)

    def close(self):
        for h in self.handles:
            shm.destroy_shared_memory_region(h)


def shm_infer(client, module, regions, x, in_offset=0, in_size=IN_BYTES, out_size=OUT_BYTES,
              parameters=None):
    shm.set_shared_memory_region(regions.handles[0], [x])
    inp = module.InferInput("input", [ROWS, 784], "FP32")
    inp.set_shared_memory(regions.names[0], in_size, offset=in_offset)
    out = module.InferRequestedOutput("logits")
    out.set_shared_memory(regions.names[1], out_size)
    return client.infer("mlp", [inp], outputs=[out], parameters=parameters)


def round_trip(client, module, label, regions, http):
    regions.register(client)
    status = client.get_system_shared_memory_status()
    names = ([r["name"] for r in status] if module is httpclient
             else list(status.regions.keys()))
    check(sorted(names) == sorted(regions.names), f"{label}: status lists both regions: {names}")
    for attempt in range(4):  # Connections may reach either hook host.
        x = RNG.standard_normal((ROWS, 784)).astype(np.float32)
        want = reference(http, x)
        result = shm_infer(client, module, regions, x)
        got = shm.get_contents_as_numpy(regions.handles[1], np.float32, [ROWS, 10])
        check(np.allclose(got, want, atol=1e-5),
              f"{label}: the output region holds the MLP's answer (request {attempt + 1})")
    out = result.get_output("logits")
    if module is httpclient:
        named, has_data = out["parameters"].get("shared_memory_region"), "data" in out
    else:
        named = out.parameters["shared_memory_region"].string_param
        has_data = len(result.get_response().raw_output_contents[0]) > 0
    check(named == regions.names[1] and not has_data,
          f"{label}: the answer names the output's region and carries no data")


def hostile(client, module, label, regions):
    x = RNG.standard_normal((ROWS, 784)).astype(np.float32)
    check(refused(lambda: shm_infer(client, module, regions, x, in_offset=8),
                  f"past its {IN_BYTES} bytes") == f"past its {IN_BYTES} bytes",
          f"{label}: a place past its region refused")
    check(refused(lambda: shm_infer(client, module, regions, x, in_size=IN_BYTES - 4),
                  "shared_memory_byte_size") == "shared_memory_byte_size",
          f"{label}: a byte size other than the tensor's refused")
    check(refused(lambda: shm_infer(client, module, regions, x, out_size=8), "gives it 8")
          == "gives it 8", f"{label}: an output larger than its place refused")
    client.unregister_system_shared_memory(regions.names[0])
    gone = refused(lambda: shm_infer(client, module, regions, x), "no shared-memory region")
    check(gone == "no shared-memory region", f"{label}: an unregistered region refused by name: {gone}")
    check(refused(lambda: client.register_system_shared_memory(regions.names[1], regions.keys[1],
                                                                 OUT_BYTES),
                  "already registered") == "already registered",
          f"{label}: a name taken twice refused")
    for key, want in ((f"/ferry-{TAG}", "the node's own"), ("/a/b", "may hold only"),
                      ("noslash", "'/' and 1 to 254"), (f"/{TAG}_missing", "no shared-memory"),
                      (f"/{TAG}_fifo", "not a regular file")):
        check(refused(lambda: client.register_system_shared_memory("bad", key, 8), want) == want,
              f"{label}: key {key!r} refused ({want})")
    check(refused(lambda: client.register_cuda_shared_memory("gpu", base64.b64encode(b"h"), 0, 8),
                  "CUDA shared memory is not supported") == "CUDA shared memory is not supported",
          f"{label}: CUDA shared memory refused with its message")
    client.unregister_system_shared_memory()
    status = client.get_system_shared_memory_status()
    check(len(status if module is httpclient else status.regions) == 0,
          f"{label}: unregister with no name removes every region")


def bounded(client):
    """16 regions a tenant: the 17th is refused by name (429), and unregistering frees them."""
    handles = [shm.create_shared_memory_region(f"b{i}", f"/{TAG}_b{i}", 8) for i in range(17)]
    try:
        for i in range(16):
            client.register_system_shared_memory(f"b{i}", f"/{TAG}_b{i}", 8)
        got = refused(lambda: client.register_system_shared_memory("b16", f"/{TAG}_b16", 8),
                      "at most 16 regions per tenant")
        check(got == "at most 16 regions per tenant", f"the 17th region refused: {got[:80]}")
        client.unregister_system_shared_memory()
        client.register_system_shared_memory("b16", f"/{TAG}_b16", 8)
        check(len(client.get_system_shared_memory_status()) == 1, "unregistering freed the room")
        client.unregister_system_shared_memory()
    finally:
        for h in handles:
            shm.destroy_shared_memory_region(h)


def truncated(client, regions):
    """A region whose object shrinks after registration: a short read, refused; the node lives."""
    regions.register(client)
    os.truncate(f"/dev/shm{regions.keys[0]}", 100)
    x = RNG.standard_normal((ROWS, 784)).astype(np.float32)
    inp = httpclient.InferInput("input", [ROWS, 784], "FP32")
    inp.set_shared_memory(regions.names[0], IN_BYTES)
    check(refused(lambda: client.infer("mlp", [inp]), "shorter than registered")
          == "shorter than registered", "a truncated region refused (no crash)")
    check(reference(client, x).shape == (ROWS, 10), "the node still serves after it")
    client.unregister_system_shared_memory()


def main():
    http = httpclient.InferenceServerClient(sys.argv[1])
    grpc = grpcclient.InferenceServerClient(sys.argv[2])
    os.mkfifo(f"/dev/shm/{TAG}_fifo")
    made = [Regions("http"), Regions("grpc"), Regions("cross"), Regions("cut")]
    try:
        round_trip(http, httpclient, "HTTP", made[0], http)
        hostile(http, httpclient, "HTTP", made[0])
        round_trip(grpc, grpcclient, "gRPC", made[1], http)
        hostile(grpc, grpcclient, "gRPC", made[1])
        # Registered over HTTP, used over gRPC: the registry is the node's.
        made[2].register(http)
        x = RNG.standard_normal((ROWS, 784)).astype(np.float32)
        shm_infer(grpc, grpcclient, made[2], x)
        got = shm.get_contents_as_numpy(made[2].handles[1], np.float32, [ROWS, 10])
        check(np.allclose(got, reference(http, x), atol=1e-5),
              "a region registered over HTTP serves a gRPC request")
        # A request naming a tenant uses its caller's regions (the anonymous ones here): the
        # regions' owner is who the caller is, never who a request says it is.
        x = RNG.standard_normal((ROWS, 784)).astype(np.float32)
        shm_infer(http, httpclient, made[2], x, parameters={"tenant": "acme"})
        got = shm.get_contents_as_numpy(made[2].handles[1], np.float32, [ROWS, 10])
        check(np.allclose(got, reference(http, x), atol=1e-5),
              "a request naming a tenant reads and writes its caller's regions")
        http.unregister_system_shared_memory()
        bounded(http)
        truncated(http, made[3])
    finally:
        for r in made:
            r.close()
        os.unlink(f"/dev/shm/{TAG}_fifo")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
