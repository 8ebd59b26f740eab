"""API keys with tritonclient, unchanged, over HTTP and gRPC (scripts/auth-test.sh starts the
node: acme may call the MLP, globex every model; auth required, health open)."""
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from checks import check, failures, refused


def main():
    http = httpclient.InferenceServerClient(sys.argv[1])
    grpc = grpcclient.InferenceServerClient(sys.argv[2])
    x = np.full((1, 784), 0.1, np.float32)

    def http_infer(model, headers):
        inp = httpclient.InferInput("input" if model == "mlp" else "image", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return http.infer(model, [inp], headers=headers)

    def grpc_infer(model, headers):
        inp = grpcclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return grpc.infer(model, [inp], headers=headers, client_timeout=30)

    acme = {"Authorization": "Bearer acme-key-1"}
    check(http.is_server_live(), "HTTP: health open without a key")
    check(refused(lambda: http_infer("mlp", {}), "401") == "401", "HTTP: no key 401")
    check(refused(lambda: http_infer("mlp", {"Authorization": "Bearer nope"}), "401") == "401",
          "HTTP: a wrong key 401")
    check(refused(lambda: http.get_model_metadata("cnn", headers=acme), "403") == "403",
          "HTTP: another tenant's model 403")
    out = http_infer("mlp", acme).as_numpy("logits")
    check(out is not None and out.shape == (1, 10), "HTTP: the right key 200")
    check(grpc.is_server_live(), "gRPC: health open without a key")
    check(refused(lambda: grpc_infer("mlp", {}), "UNAUTHENTICATED") == "UNAUTHENTICATED",
          "gRPC: no key UNAUTHENTICATED")
    check(refused(lambda: grpc_infer("mlp", {"authorization": "Bearer nope"}), "UNAUTHENTICATED")
          == "UNAUTHENTICATED", "gRPC: a wrong key UNAUTHENTICATED")
    check(refused(lambda: grpc_infer("cnn", {"authorization": "Bearer acme-key-1"}),
                  "PERMISSION_DENIED") == "PERMISSION_DENIED", "gRPC: another tenant's model PERMISSION_DENIED")
    out = grpc_infer("mlp", {"authorization": "Bearer acme-key-1"}).as_numpy("logits")
    check(out is not None and out.shape == (1, 10), "gRPC: the right key")
    index = grpc.get_model_repository_index(headers={"authorization": "Bearer acme-key-1"})
    check([m.name for m in index.models] == ["mlp"], "gRPC: acme's index lists only its model")
    stats = http.get_inference_statistics(headers={"Authorization": "Bearer globex-key"})
    check({m["name"] for m in stats["model_stats"]} == {"cnn", "mlp"}, "HTTP: globex sees every model's statistics")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


main()
