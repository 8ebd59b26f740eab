#!/usr/bin/python3
"""Exports PyTorch models to ONNX with their reference answers, for the importer's tests and
the demo. Debian's python3-torch and python3-torchvision; seeded weights, nothing downloaded.

    /usr/bin/python3 scripts/make_onnx_models.py OUT_DIR [--models resnet18,cnn,...] [--batch 2]

Writes OUT_DIR/NAME/model.onnx (a dynamic batch axis named N), input_0.pb (a seeded batch) and
output_0.pb (the module's own answer in eval mode), the tensors as ONNX TensorProtos like the
ONNX backend tests' test_data_set_0, and the same two as input.npy and output.npy.
"""
import argparse
import math
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


def mobilenet_v3_small():
    """HardSwish and HardSigmoid (squeeze-and-excitation), depthwise convolutions."""
    import torchvision
    return torchvision.models.mobilenet_v3_small(weights=None), (3, 224, 224)


def googlenet():
    """Concat of four computed branches, MaxPool in ceil mode. torchvision's own init draws
    the weights so small that every image gets the same answer: Kaiming's instead."""
    import torchvision
    model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False)
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight)
    return model, (3, 224, 224)


def densenet121():
    """Concat growing along channels, AveragePool (exported behind a Pad of zeros)."""
    import torchvision
    return torchvision.models.densenet121(weights=None), (3, 224, 224)


def shufflenet():
    """Channel shuffle (5-D reshape and transpose), Split, and x.mean([2, 3])."""
    import torchvision
    return torchvision.models.shufflenet_v2_x0_5(weights=None), (3, 224, 224)


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


class EncoderBlock(torch.nn.Module):
    """Multi-head self-attention with an additive padding mask, then a GELU MLP; post-norm."""

    def __init__(self, seq, width, heads):
        super().__init__()
        self.seq, self.width, self.heads = seq, width, heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width) for _ in range(4))
        self.fc1, self.fc2 = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)

    def split(self, x):  # [N, S, D] -> [N, H, S, D / H]
        return x.reshape(-1, self.seq, self.heads, self.width // self.heads).transpose(1, 2)

    def forward(self, x, bias):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = q @ k.transpose(-2, -1) / (self.width // self.heads) ** 0.5 + bias
        attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)
        x = self.ln1(x + self.o(attended.reshape(-1, self.seq, self.width)))
        return self.ln2(x + self.fc2(torch.nn.functional.gelu(self.fc1(x))))


class Encoder(torch.nn.Module):
    """BERT-style: token and position embeddings, layers of multi-head attention under a
    padding mask, layer norm, GELU MLPs; INT64 token ids and mask in, class scores from the
    mean of the last layer's tokens out."""

    def __init__(self, vocabulary=1000, seq=16, width=32, heads=4, layers=2, classes=4):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocabulary, width)
        self.position = torch.nn.Parameter(torch.randn(seq, width) * 0.1)
        self.blocks = torch.nn.ModuleList(EncoderBlock(seq, width, heads) for _ in range(layers))
        self.classify = torch.nn.Linear(width, classes)

    def forward(self, ids, mask):
        x = self.embedding(ids) + self.position
        bias = (1.0 - mask.to(torch.float32))[:, None, None, :] * -10000.0
        for block in self.blocks:
            x = block(x, bias)
        return self.classify(x.mean(dim=1))


class HfSelfAttention(torch.nn.Module):
    """Attention as Hugging Face's modeling_bert writes it: shapes read from the tensors
    (`x.size()[:-1] + (heads, head_size)`), which the exporter turns into Shape, Gather,
    Unsqueeze and Concat chains that ferry folds at import."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.head_size = heads, width // heads
        self.query, self.key, self.value = (torch.nn.Linear(width, width) for _ in range(3))

    def split(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.head_size)).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size) + mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.heads * self.head_size,))


class HfLayer(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.attention, self.out = HfSelfAttention(width, heads), torch.nn.Linear(width, width)
        self.fc1, self.fc2 = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
        self.ln1 = torch.nn.LayerNorm(width, eps=1e-12)
        self.ln2 = torch.nn.LayerNorm(width, eps=1e-12)

    def forward(self, x, mask):
        x = self.ln1(self.out(self.attention(x, mask)) + x)
        return self.ln2(self.fc2(torch.nn.functional.gelu(self.fc1(x))) + x)


class HfBert(torch.nn.Module):
    """BERT as Hugging Face writes it: word, position and token-type embeddings (position ids
    and token types sliced from buffers by the input's length and expanded to the batch), the
    extended attention mask `(1 - mask[:, None, None, :]) * finfo.min`, post-norm layers and the
    tanh pooler over the first token."""

    def __init__(self, vocabulary=1000, width=32, heads=4, layers=2, positions=64):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocabulary, width)
        self.position = torch.nn.Embedding(positions, width)
        self.token_type = torch.nn.Embedding(2, width)
        self.ln = torch.nn.LayerNorm(width, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(positions).expand((1, -1)))
        self.register_buffer("token_type_ids", torch.zeros((1, positions), dtype=torch.long))
        self.layers = torch.nn.ModuleList(HfLayer(width, heads) for _ in range(layers))
        self.pool = torch.nn.Linear(width, width)

    def forward(self, ids, mask):
        length = ids.size()[1]
        types = self.token_type_ids[:, :length].expand(ids.size(0), length)
        x = self.embedding(ids) + self.token_type(types)
        x = self.ln(x + self.position(self.position_ids[:, :length]))
        extended = (1.0 - mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, extended)
        return torch.tanh(self.pool(x[:, 0]))


def encoder():
    return Encoder(), (16,)


def bert():
    return HfBert(), (16,)


def encoder128():
    """The encoder at sequence length 128: what bench/vs_onnxruntime.py measures."""
    return Encoder(seq=128), (128,)


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2,
          "mobilenet_v3_small": mobilenet_v3_small, "googlenet": googlenet,
          "densenet121": densenet121, "shufflenet": shufflenet, "cnn": cnn, "mlp": mlp,
          "text": text, "encoder": encoder, "encoder128": encoder128, "bert": bert,
          "bert_opset14": bert}
# Models exported at their own opset: before 17, LayerNormalization is exported as
# ReduceMean, Sub, Pow, Sqrt and Div.
OPSETS = {"bert_opset14": 14}


def export(name, out_dir, batch, opset):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    module, shape = MODELS[name]()
    randomize_batch_norms(module, generator)
    module.eval()
    if isinstance(module, (TextClassifier, Encoder, HfBert)):
        x = torch.randint(0, module.embedding.num_embeddings, (batch,) + shape,
                          generator=generator)
    else:
        x = torch.randn((batch,) + shape, generator=generator)
    inputs, names = (x,), ["input"]
    if isinstance(module, (Encoder, HfBert)):  # Padding at the end of every row but the first.
        mask = torch.ones((batch,) + shape, dtype=torch.int64)
        for row in range(1, batch):
            mask[row, shape[0] - 3 * row:] = 0
        inputs, names = (x, mask), ["input", "mask"]
    with torch.no_grad():
        y = module(*inputs)
    directory = os.path.join(out_dir, name)
    os.makedirs(directory, exist_ok=True)
    opset = OPSETS.get(name, opset)
    torch.onnx.export(module, inputs, os.path.join(directory, "model.onnx"), opset_version=opset,
                      input_names=names, output_names=["output"],
                      dynamic_axes={**{n: {0: "N"} for n in names}, "output": {0: "N"}})
    for i, tensor in enumerate(inputs):
        with open(os.path.join(directory, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(tensor.numpy()).SerializeToString())
        np.save(os.path.join(directory, f"input_{i}.npy"), tensor.numpy())
    with open(os.path.join(directory, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y.numpy()).SerializeToString())
    np.save(os.path.join(directory, "input.npy"), x.numpy())
    np.save(os.path.join(directory, "output.npy"), y.numpy())


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
