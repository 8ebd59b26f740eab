#!/usr/bin/env python3
"""A client ferry did not write, against a running node: tritonclient (HTTP) runs health,
metadata, config and infer on the example models, binary and JSON tensors both, and compares
the outputs with PyTorch's float64 references in tests/data/reference (read here with numpy).

    tritonclient_test.py HTTP_HOST:PORT GRPC_HOST:PORT

The same checks run over gRPC (tritonclient.grpc: raw_input_contents in, raw_output_contents
out, ModelStreamInfer) when the gRPC address is given.
"""
import json
import os
import struct
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from checks import check, failures, refused

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=np.float32).reshape(info["shape"])
    return out


def main():
    client = httpclient.InferenceServerClient(sys.argv[1])
    check(client.is_server_live(), "server live")
    check(client.is_server_ready(), "server ready")
    meta = client.get_server_metadata()
    check("binary_tensor_data" in meta["extensions"], "server metadata lists binary_tensor_data")
    for model, input_name, output_name, reference in [
        ("mlp", "input", "logits", "mlp-default-b8.safetensors"),
        ("cnn", "image", "probs", "cnn-default-b4.safetensors"),
    ]:
        check(client.is_model_ready(model), f"{model} ready")
        md = client.get_model_metadata(model)
        check(md["inputs"][0]["name"] == input_name, f"{model} metadata names its input")
        config = client.get_model_config(model)
        check(config["max_batch_size"] > 0, f"{model} config has max_batch_size")
        ref = read_safetensors(os.path.join(ROOT, "tests", "data", "reference", reference))
        x = ref["input." + input_name]
        want = ref["output." + output_name]
        for binary in (True, False):
            inp = httpclient.InferInput(input_name, list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=binary)
            out = httpclient.InferRequestedOutput(output_name, binary_data=binary)
            result = client.infer(model, [inp], outputs=[out], request_id="r-" + model)
            got = result.as_numpy(output_name)
            err = float(np.abs(got - want).max())
            check(got.shape == want.shape and err < 1e-4,
                  f"{model} infer ({'binary' if binary else 'JSON'}) matches PyTorch (max error {err:.2e})")
            params = result.get_response().get("parameters", {})
            check(params.get("batch_size", 0) >= x.shape[0], f"{model} reports its batch size")
    # Compressed both ways, as tritonclient offers it.
    ref = read_safetensors(os.path.join(ROOT, "tests", "data", "reference", "mlp-default-b8.safetensors"))
    x, want = ref["input.input"], ref["output.logits"]
    for request_alg, response_alg in (("gzip", "deflate"), ("deflate", "gzip")):
        inp = httpclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer("mlp", [inp], request_compression_algorithm=request_alg,
                              response_compression_algorithm=response_alg)
        err = float(np.abs(result.as_numpy("logits") - want).max())
        check(err < 1e-4, f"mlp infer with a {request_alg} request and a {response_alg} answer (max error {err:.2e})")
    try:
        client.infer("nosuch", [inp])
        check(False, "unknown model refused")
    except InferenceServerException as e:
        check(e.status() == "404" or "unknown model" in str(e), "unknown model refused with 404")
    bad = httpclient.InferInput("input", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
    try:
        client.infer("mlp", [bad])
        check(False, "bad shape refused")
    except InferenceServerException as e:
        check("784" in str(e), "bad shape refused naming the expected shape")
    # The repository extension: the index is served; load and unload are off on this node.
    index = client.get_model_repository_index()
    names = {m["name"]: m for m in index}
    check(names.get("mlp", {}).get("state") == "READY" and "cnn" in names,
          f"repository index lists the models, ready ({index})")
    try:
        client.load_model("mlp")
        check(False, "repository load refused")
    except InferenceServerException as e:
        check(e.status() == "403" and "model_control" in str(e),
              f"repository load refused 403, naming model_control ({e.status()} {e})")
    # The trace extension on a node without a collector: read as off, changes refused.
    check(client.get_trace_settings().get("trace_level") == ["OFF"], "trace settings read as off")
    try:
        client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        check(False, "trace settings refused without [trace] otlp_endpoint")
    except InferenceServerException as e:
        check(e.status() == "503" and "otlp_endpoint" in str(e),
              f"trace settings refused 503 without [trace] otlp_endpoint ({e.status()} {e})")
    sequence_checks(client, grpcclient.InferenceServerClient(sys.argv[2]))
    statistics_checks(client, grpcclient.InferenceServerClient(sys.argv[2]))
    logging_checks(client, grpcclient.InferenceServerClient(sys.argv[2]))
    grpc_checks(sys.argv[2])
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all tritonclient checks passed")


def sequence_checks(client, grpc_client):
    """The mlp keeps no state: a request of a sequence to it is refused by name over both
    protocols (as Triton refuses a correlation ID for a model without a sequence batcher),
    never served as if it were not one; a string id is refused by any model
    (tests/clients/sequence_test.py serves a stateful one)."""
    x = np.zeros((1, 784), np.float32)
    for module, c in ((httpclient, client), (grpcclient, grpc_client)):
        inp = module.InferInput("input", [1, 784], "FP32")
        inp.set_data_from_numpy(x)
        for kwargs, want in (({"sequence_id": 5, "sequence_start": True}, "keeps no state"),
                             ({"sequence_id": "corr-7"}, "not strings"),
                             ({"sequence_id": 5, "sequence_end": True}, "keeps no state")):
            got = refused(lambda: c.infer("mlp", [inp], **kwargs), want)
            check(got == want, f"{module.__name__}: {kwargs} refused: {got[:80]}")
        check(c.infer("mlp", [inp], sequence_id=0) is not None,
              f"{module.__name__}: sequence_id 0 (none) served")


def statistics_checks(client, grpc_client):
    """The statistics extension over HTTP and gRPC: five requests of one row each show up as
    five successes, five inferences, queue and compute time, and executions split by size."""
    def cnn_stats():
        return client.get_inference_statistics("cnn")["model_stats"][0]
    # Earlier checks ran the CNN: wait until their answers are all counted.
    before, settled = cnn_stats(), None
    while before != settled:
        time.sleep(0.2)
        settled, before = before, cnn_stats()
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    for _ in range(5):
        inp = httpclient.InferInput("image", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        client.infer("cnn", [inp])
    deadline = time.time() + 10  # The workers publish their status every few ms.
    after = cnn_stats()
    while after["inference_stats"]["success"]["count"] < before["inference_stats"]["success"]["count"] + 5 \
            and time.time() < deadline:
        time.sleep(0.05)
        after = cnn_stats()
    def delta(*path):
        a, b = after, before
        for key in path:
            a, b = a[key], b[key]
        return a - b
    check(delta("inference_stats", "success", "count") == 5, f"stats: 5 successes ({after})")
    check(delta("inference_count") == 5, "stats: 5 inferences (one row each)")
    check(1 <= delta("execution_count") <= 5, "stats: between 1 and 5 executions")
    check(delta("inference_stats", "queue", "count") == 5, "stats: 5 requests queued")
    check(delta("inference_stats", "compute_infer", "ns") > 0 and
          delta("inference_stats", "success", "ns") >= delta("inference_stats", "compute_infer", "ns") / 5,
          "stats: compute and request time counted")
    check(sum(b["compute_infer"]["count"] for b in after["batch_stats"]) == after["execution_count"],
          "stats: batch_stats add up to the executions")
    check(abs(after["last_inference"] - time.time() * 1000) < 60_000, "stats: last_inference is now")
    check(after["version"] == "1", "stats: the version")
    versioned = client.get_inference_statistics("cnn", "1")["model_stats"][0]
    check(versioned["inference_count"] >= after["inference_count"], "stats: by version")
    every = {m["name"] for m in client.get_inference_statistics()["model_stats"]}
    check({"cnn", "mlp"} <= every, f"stats: every model ({every})")
    g = grpc_client.get_inference_statistics("cnn").model_stats[0]
    check(g.name == "cnn" and g.inference_count >= after["inference_count"] and
          g.inference_stats.success.count >= after["inference_stats"]["success"]["count"],
          "gRPC stats: the same counts")
    for name, version in (("nosuch", ""), ("cnn", "9")):
        try:
            client.get_inference_statistics(name, version)
            check(False, f"stats of {name} version {version!r} refused")
        except InferenceServerException as e:
            check(e.status() == "404" or "404" in str(e) or "no version" in str(e) or "unknown" in str(e),
                  f"stats of {name} version {version!r}: 404 ({e})")
        try:
            grpc_client.get_inference_statistics(name, version)
            check(False, f"gRPC stats of {name} version {version!r} refused")
        except InferenceServerException as e:
            check("NOT_FOUND" in str(e.status()), f"gRPC stats of {name} {version!r}: NOT_FOUND")


def logging_checks(client, grpc_client):
    """The logging extension: settings read and changed over HTTP and gRPC, the change taken
    by the whole node (every hook host answers it), hostile settings refused."""
    import time
    defaults = {"log_info": True, "log_warning": True, "log_error": True,
                "log_verbose_level": 0, "log_format": "default"}
    check(client.get_log_settings() == dict(defaults, log_file=""),
          f"logging: the settings at start ({client.get_log_settings()})")
    changed = client.update_log_settings({"log_verbose_level": 1})
    check(changed.get("log_verbose_level") == 1, f"logging: HTTP update answers the new settings ({changed})")
    # Any hook host answers the node's settings once ferryd has taken the change (a tick).
    seen = 0
    for _ in range(100):
        fresh = httpclient.InferenceServerClient(sys.argv[1])  # A new connection: any hook host.
        seen = fresh.get_log_settings().get("log_verbose_level")
        fresh.close()
        if seen == 1:
            break
        time.sleep(0.05)
    check(seen == 1, "logging: the change reaches a new connection")
    # The gRPC connection may be on the other hook host: it answers once ferryd took the change.
    for _ in range(100):
        got = grpc_client.get_log_settings(as_json=True)["settings"]
        if got.get("log_verbose_level", {}).get("uint32_param") == 1:
            break
        time.sleep(0.05)
    check(got.get("log_verbose_level", {}).get("uint32_param") == 1,
          f"logging: gRPC reads the node's settings ({got})")
    grpc_client.update_log_settings({"log_verbose_level": 0, "log_format": "ISO8601"})
    for _ in range(100):
        if client.get_log_settings().get("log_format") == "ISO8601":
            break
        time.sleep(0.05)
    check(client.get_log_settings().get("log_format") == "ISO8601", "logging: gRPC update reaches HTTP")
    for bad, why in (({"log_file": "/tmp/ferry.log"}, "must be empty"),
                     ({"log_verbose_level": "loud"}, "log_verbose_level"),
                     ({"log_info": 1}, "log_info"),
                     ({"log_format": "xml"}, "log_format"),
                     ({"log_level": 3}, "not a log setting")):
        try:
            client.update_log_settings(bad)
            check(False, f"logging: {bad} refused")
        except InferenceServerException as e:
            check(why in str(e), f"logging: {bad} refused naming {why} ({e})")
    try:
        grpc_client.update_log_settings({"log_verbose_level": 300})
        check(False, "logging: gRPC verbose level 300 refused")
    except InferenceServerException as e:
        check("INVALID_ARGUMENT" in str(e.status()), f"logging: gRPC verbose 300 refused ({e})")
    client.update_log_settings(defaults)
    for _ in range(100):
        if client.get_log_settings()["log_format"] == "default":
            break
        time.sleep(0.05)
    check(client.get_log_settings()["log_format"] == "default", "logging: back to the defaults")


def typed_contents_checks(address):
    """ModelInfer with typed contents (fp32_contents, not raw_input_contents), built from the
    protocol's own messages as tritonclient ships them: other clients send tensors this way."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    ref = read_safetensors(os.path.join(ROOT, "tests", "data", "reference", "cnn-default-b4.safetensors"))
    x, want = ref["input.image"], ref["output.probs"]
    x = np.ascontiguousarray(x[0:2], dtype=np.float32)
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="cnn", id="typed")
        tensor = request.inputs.add(name="image", datatype="FP32", shape=list(x.shape))
        tensor.contents.fp32_contents.extend(x.ravel().tolist())
        request.outputs.add(name="probs")
        reply = stub.ModelInfer(request, timeout=30)
        out = np.frombuffer(reply.raw_output_contents[0], dtype=np.float32).reshape(2, -1)
        err = float(np.abs(out - want[0:2]).max())
        check(reply.id == "typed" and err < 1e-4,
              f"gRPC typed fp32_contents infer matches PyTorch (max error {err:.2e})")
        del tensor.contents.fp32_contents[-1]  # One value short of the shape.
        try:
            stub.ModelInfer(request, timeout=30)
            check(False, "gRPC typed contents one value short refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "image" in e.details(),
                  f"gRPC typed contents one value short refused: {e.details()[:80]}")


def unary_trace_metadata_checks(address, trace):
    """ModelInfer echoes a valid traceparent in its initial metadata, a refusal's too; an invalid
    one (uppercase hex) is ignored."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    request = service_pb2.ModelInferRequest(model_name="mlp")
    request.inputs.add(name="input", datatype="FP32", shape=[1, 784])
    request.raw_input_contents.append(np.zeros((1, 784), np.float32).tobytes())
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        reply, call = stub.ModelInfer.with_call(request, metadata=[("traceparent", trace)],
                                                timeout=30)
        check(dict(call.initial_metadata()).get("traceparent") == trace,
              "gRPC ModelInfer initial metadata carries the traceparent")
        upper = trace[:3] + "B" + trace[4:]
        reply, call = stub.ModelInfer.with_call(request, metadata=[("traceparent", upper)],
                                                timeout=30)
        check("traceparent" not in dict(call.initial_metadata()) and
              "traceparent" not in reply.parameters,
              "gRPC: an invalid traceparent is ignored")
        request.model_name = "no_such_model"
        try:
            stub.ModelInfer.with_call(request, metadata=[("traceparent", trace)], timeout=30)
            check(False, "gRPC unknown model refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.NOT_FOUND and
                  dict(e.initial_metadata()).get("traceparent") == trace,
                  "gRPC refusal's initial metadata carries the traceparent")


def stream_trace_checks(address, trace):
    """ModelStreamInfer with a traceparent in the stream's metadata: a served request and an
    error in its place both carry it (the protocol's own messages, as tritonclient ships them)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    good = service_pb2.ModelInferRequest(model_name="mlp", id="s-good")
    good.inputs.add(name="input", datatype="FP32", shape=[1, 784])
    good.raw_input_contents.append(np.zeros((1, 784), np.float32).tobytes())
    bad = service_pb2.ModelInferRequest(model_name="no_such_model", id="s-bad")
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = list(stub.ModelStreamInfer(iter([good, bad]), metadata=[("traceparent", trace)],
                                             timeout=30))
    check(len(answers) == 2, f"gRPC stream with a traceparent: {len(answers)} answers")
    if len(answers) == 2:
        ok, err = answers
        check(not ok.error_message and ok.infer_response.id == "s-good" and
              ok.infer_response.parameters["traceparent"].string_param == trace,
              "gRPC stream answer carries the traceparent")
        check("no_such_model" in err.error_message and err.infer_response.id == "s-bad" and
              err.infer_response.parameters["traceparent"].string_param == trace,
              "gRPC stream error carries the traceparent")


def malformed_message_checks(address):
    """A ModelInfer message that is not valid protobuf is INVALID_ARGUMENT naming the message,
    unary and in a stream (where the stream goes on and serves the next request)."""
    import grpc
    from tritonclient.grpc import service_pb2
    garbage = b"\x0a\xff\xff\xff\x0f"  # Field 1, length 2^32 - 1: past the message's end.
    good = service_pb2.ModelInferRequest(model_name="mlp", id="after-garbage")
    good.inputs.add(name="input", datatype="FP32", shape=[1, 784])
    good.raw_input_contents.append(np.zeros((1, 784), np.float32).tobytes())
    with grpc.insecure_channel(address) as channel:
        unary = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            unary(garbage, timeout=30)
            check(False, "gRPC malformed ModelInfer refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and
                  "not a valid inference.ModelInferRequest" in e.details(),
                  f"gRPC malformed ModelInfer is INVALID_ARGUMENT: {e.code()} {e.details()[:80]}")
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        answers = [service_pb2.ModelStreamInferResponse.FromString(b)
                   for b in stream(iter([garbage, good.SerializeToString()]), timeout=30)]
    check(len(answers) == 2 and
          "not a valid inference.ModelInferRequest" in answers[0].error_message and
          not answers[1].error_message and answers[1].infer_response.id == "after-garbage",
          f"gRPC stream: a malformed request answered in its place, the next one served "
          f"({[a.error_message[:60] for a in answers]})")


def grpc_checks(address):
    client = grpcclient.InferenceServerClient(address)
    check(client.is_server_live(), "gRPC server live")
    check(client.is_server_ready(), "gRPC server ready")
    check("binary_tensor_data" in client.get_server_metadata().extensions, "gRPC server metadata")
    for model, input_name, output_name, reference in [
        ("mlp", "input", "logits", "mlp-default-b8.safetensors"),
        ("cnn", "image", "probs", "cnn-default-b4.safetensors"),
    ]:
        check(client.is_model_ready(model), f"gRPC {model} ready")
        check(client.get_model_metadata(model).inputs[0].name == input_name, f"gRPC {model} metadata")
        check(client.get_model_config(model).config.max_batch_size > 0, f"gRPC {model} config")
        ref = read_safetensors(os.path.join(ROOT, "tests", "data", "reference", reference))
        x, want = ref["input." + input_name], ref["output." + output_name]
        inp = grpcclient.InferInput(input_name, list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer(model, [inp], outputs=[grpcclient.InferRequestedOutput(output_name)],
                              request_id="g-" + model, client_timeout=30)
        err = float(np.abs(result.as_numpy(output_name) - want).max())
        check(err < 1e-4, f"gRPC {model} infer matches PyTorch (max error {err:.2e})")
    typed_contents_checks(address)
    malformed_message_checks(address)
    # ModelStreamInfer: several requests on one stream, answered in order, one of them an error.
    import queue
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    ref = read_safetensors(os.path.join(ROOT, "tests", "data", "reference", "mlp-default-b8.safetensors"))
    x, want = ref["input.input"], ref["output.logits"]
    for i in range(4):
        inp = grpcclient.InferInput("input", [1, 784], "FP32")
        inp.set_data_from_numpy(x[i:i + 1])
        client.async_stream_infer("mlp", [inp], request_id=str(i))
        if i == 1:  # An error in the stream is answered in its place and the stream goes on.
            client.async_stream_infer("no_such_model", [inp], request_id="bad")
    for i in range(4):
        if i == 2:
            result, error = answers.get(timeout=30)
            check(error is not None and "unknown model 'no_such_model'" in str(error),
                  f"gRPC stream: an unknown model answered in order as an error ({error})")
        result, error = answers.get(timeout=30)
        ok = error is None and float(np.abs(result.as_numpy("logits") - want[i:i + 1]).max()) < 1e-4
        check(ok and result.get_response().id == str(i), f"gRPC stream answer {i} in order and exact")
    client.stop_stream()
    # 80 streams left open and idle (more than gRPC's 64 threads): none holds a thread, so
    # calls on another channel are still answered at once.
    streams = []
    for i in range(80):
        c = grpcclient.InferenceServerClient(address)
        c.start_stream(callback=lambda result, error: None)
        streams.append(c)
    time.sleep(0.5)
    started = time.time()
    ready = grpcclient.InferenceServerClient(address).is_server_ready(client_timeout=5)
    inp = grpcclient.InferInput("input", [1, 784], "FP32")
    inp.set_data_from_numpy(x[0:1])
    served = client.infer("mlp", [inp], client_timeout=5)
    check(ready and served.as_numpy("logits") is not None and time.time() - started < 5,
          f"gRPC: 80 idle streams open, ServerReady and ModelInfer answered in {time.time() - started:.2f} s")
    for c in streams:
        c.stop_stream()
        c.close()
    index = client.get_model_repository_index()
    check({"cnn", "mlp"} <= {m.name for m in index.models} and
          all(m.state == "READY" for m in index.models), "gRPC repository index")
    try:
        client.unload_model("mlp")
        check(False, "gRPC repository unload refused")
    except InferenceServerException as e:
        check("PERMISSION_DENIED" in str(e.status()) and "model_control" in str(e),
              "gRPC repository unload refused PERMISSION_DENIED, naming model_control")
    try:
        client.infer("nosuch", [inp])
        check(False, "gRPC unknown model refused")
    except InferenceServerException as e:
        check("NOT_FOUND" in str(e.status()), "gRPC unknown model refused with NOT_FOUND")
    # Priority: a level (1 most urgent .. 3) or 0; a tenant must be declared (none here).
    ok_inp = grpcclient.InferInput("input", [1, 784], "FP32")
    ok_inp.set_data_from_numpy(np.zeros((1, 784), np.float32))
    check(client.infer("mlp", [ok_inp], priority=1).as_numpy("logits").shape == (1, 10),
          "gRPC priority 1 served")
    # A W3C traceparent in the call's metadata comes back with the answer, on a stream too,
    # errors included.
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    traced = client.infer("mlp", [ok_inp], headers={"traceparent": trace}).get_response()
    check(traced.parameters["traceparent"].string_param == trace,
          "gRPC traceparent carried by the answer")
    stream_trace_checks(address, trace)
    unary_trace_metadata_checks(address, trace)
    for what, kwargs in [("priority 7", {"priority": 7}),
                         ("an undeclared tenant (metadata)", {"headers": {"ferry-tenant": "acme"}}),
                         ("an undeclared tenant (parameter)", {"parameters": {"tenant": "acme"}})]:
        try:
            client.infer("mlp", [ok_inp], **kwargs)
            check(False, f"gRPC {what} refused")
        except InferenceServerException as e:
            check("INVALID_ARGUMENT" in str(e.status()), f"gRPC {what} refused: {e.message()[:80]}")
    bad = grpcclient.InferInput("input", [1, 3], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
    try:
        client.infer("mlp", [bad])
        check(False, "gRPC bad shape refused")
    except InferenceServerException as e:
        check("INVALID_ARGUMENT" in str(e.status()) and "784" in str(e), "gRPC bad shape refused naming the shape")


if __name__ == "__main__":
    main()
