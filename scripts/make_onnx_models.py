#!/usr/bin/python3
"""Exports PyTorch models to ONNX with their reference answers, for the importer's tests and
the demo. Debian's python3-torch and python3-torchvision; seeded weights, nothing downloaded.

    /usr/bin/python3 scripts/make_onnx_models.py OUT_DIR [--models resnet18,cnn,...] [--batch 2]

Writes OUT_DIR/NAME/model.onnx (a dynamic batch axis named N), input_0.pb (a seeded batch) and
output_0.pb (the module's own answer in eval mode), the tensors as ONNX TensorProtos like the
ONNX backend tests' test_data_set_0, and the same two as input.npy and output.npy.
"""
import argparse
import os

import numpy as np
import torch
from onnx import numpy_helper


def randomize_batch_norms(module, generator):
    """Running statistics and affine parameters away from their identity defaults, so folding
    batch norm into a convolution is actually tested."""
    for m in module.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=generator) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=generator) + 0.5)
            m.bias.data.copy_(torch.randn(n, generator=generator) * 0.1)


def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=1000), (3, 224, 224)


def mobilenet_v2():
    import torchvision
    return torchvision.models.mobilenet_v2(weights=None, num_classes=1000), (3, 224, 224)


def cnn():
    layers = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.MaxPool2d(3, stride=2, padding=1),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Sigmoid(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
        torch.nn.Softmax(dim=1))
    return layers, (3, 32, 32)


def mlp():
    layers = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.BatchNorm1d(128), torch.nn.Tanh(),
        torch.nn.Linear(128, 128), torch.nn.LayerNorm(128), torch.nn.GELU(),
        torch.nn.Dropout(0.1), torch.nn.Linear(128, 10))
    return layers, (64,)


class TextClassifier(torch.nn.Module):
    """fastText-style: token ids -> embeddings -> their mean -> class scores. INT64 inputs."""

    def __init__(self, vocabulary=1000, width=32, classes=4):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocabulary, width)
        self.classify = torch.nn.Linear(width, classes)

    def forward(self, ids):
        return torch.softmax(self.classify(self.embedding(ids).mean(dim=1)), dim=1)


def text():
    return TextClassifier(), (16,)


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "cnn": cnn, "mlp": mlp,
          "text": text}


def export(name, out_dir, batch, opset):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    module, shape = MODELS[name]()
    randomize_batch_norms(module, generator)
    module.eval()
    if isinstance(module, TextClassifier):
        x = torch.randint(0, module.embedding.num_embeddings, (batch,) + shape,
                          generator=generator)
    else:
        x = torch.randn((batch,) + shape, generator=generator)
    with torch.no_grad():
        y = module(x)
    directory = os.path.join(out_dir, name)
    os.makedirs(directory, exist_ok=True)
    torch.onnx.export(module, x, os.path.join(directory, "model.onnx"), opset_version=opset,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    for file, tensor in (("input_0.pb", x), ("output_0.pb", y)):
        with open(os.path.join(directory, file), "wb") as f:
            f.write(numpy_helper.from_array(tensor.numpy()).SerializeToString())
        np.save(os.path.join(directory, file.replace("_0.pb", ".npy")), tensor.numpy())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--opset", type=int, default=17)
    args = parser.parse_args()
    for name in args.models.split(","):
        export(name, args.out_dir, args.batch, args.opset)
        print(f"{name}: {os.path.join(args.out_dir, name, 'model.onnx')}")


if __name__ == "__main__":
    main()
