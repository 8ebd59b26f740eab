#!/usr/bin/env python3
"""Text through a node: tritonclient sends sentences as BYTES (HTTP binary and JSON, gRPC) to
the encoder imported from ONNX behind the example tokenizer plugin; the answers equal
onnxruntime's on the same ONNX file fed the ids and mask the tokenizer's rule gives (within
1e-4 of the output's scale).

    text_served_test.py HTTP_HOST:PORT GRPC_HOST:PORT ENCODER_EXPORT_DIR MODEL SEQ VOCAB
"""
import os
import sys

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from checks import check, failures


def word_byte(b):
    return chr(b).isascii() and chr(b).isalnum() or b >= 0x80


def tokenize(sentences, seq, vocab):
    """examples/hooks/tokenizer.c's rule: words are runs of ASCII letters and digits and of
    bytes >= 0x80, lowercased; id = 1 + FNV-1a(word) mod (vocab - 1); 0 pads."""
    ids = np.zeros((len(sentences), seq), dtype=np.int64)
    mask = np.zeros((len(sentences), seq), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        data, i, n = sentence.encode(), 0, 0
        while n < seq and i < len(data):
            while i < len(data) and not word_byte(data[i]):
                i += 1
            if i == len(data):
                break
            h = 14695981039346656037
            while i < len(data) and word_byte(data[i]):
                b = data[i] + 32 if 65 <= data[i] <= 90 else data[i]  # ASCII lowercase.
                h = ((h ^ b) * 1099511628211) % 2**64
                i += 1
            ids[row, n], mask[row, n] = 1 + h % (vocab - 1), 1
            n += 1
    return ids, mask


def relative(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def main():
    http = httpclient.InferenceServerClient(sys.argv[1])
    grpc = grpcclient.InferenceServerClient(sys.argv[2])
    directory, model = sys.argv[3], sys.argv[4]
    seq, vocab = int(sys.argv[5]), int(sys.argv[6])
    sentences = ["ferry serves text", "Hello, World! 42 TIMES over", "", "naïve café"]
    ids, mask = tokenize(sentences, seq, vocab)
    session = ort.InferenceSession(os.path.join(directory, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {"input": ids, "mask": mask})[0]
    text = np.array([s.encode() for s in sentences], dtype=np.object_)
    for binary in (True, False):
        inp = httpclient.InferInput("text", [len(sentences)], "BYTES")
        inp.set_data_from_numpy(text, binary_data=binary)
        got = http.infer(model, [inp]).as_numpy("output")
        check(got is not None and relative(got, want) <= 1e-4,
              f"{model}: HTTP BYTES ({'binary' if binary else 'JSON'}) equals onnxruntime "
              f"({relative(got, want):.1e})")
    ginp = grpcclient.InferInput("text", [len(sentences)], "BYTES")
    ginp.set_data_from_numpy(text)
    got = grpc.infer(model, [ginp]).as_numpy("output")
    check(got is not None and relative(got, want) <= 1e-4,
          f"{model}: gRPC BYTES equals onnxruntime ({relative(got, want):.1e})")
    bad = httpclient.InferInput("input", [1, seq], "INT64")
    bad.set_data_from_numpy(ids[:1], binary_data=True)
    try:
        http.infer(model, [bad])
        check(False, f"{model}: ids instead of text refused")
    except Exception as e:
        check("expected BYTES" in str(e) or "text" in str(e), f"{model}: ids instead of text refused")
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
