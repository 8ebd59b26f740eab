#include "model/onnx/onnx_import.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/onnx/converter.h"
#include "model/shape_inference.h"

namespace ferry::onnx_import {
namespace {

namespace fs = std::filesystem;

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);  // Reads back as the same double.
  std::string out = text;
  return out.find_first_of(".en") == std::string::npos ? out + ".0" : out;
}

void WriteTensors(std::ostringstream& out, const char* table,
                  const std::vector<TensorSpec>& specs) {
  for (const TensorSpec& t : specs) {
    out << "\n[[" << table << "]]\nname = \"" << t.name << "\"\ndtype = \"" << KServeName(t.dtype)
        << "\"\nshape = " << ShapeToString(t.shape) << "\n";
    if (t.range) {
      out << "range = [" << (*t.range)[0] << ", " << (*t.range)[1] << "]\n";
    }
  }
}

void WriteOp(std::ostringstream& out, const Op& op) {
  out << "\n[[program]]\nop = \"" << OpKindName(op.kind) << "\"\n";
  if (op.inputs.size() >= 2) {
    out << "inputs = [";
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      out << (i == 0 ? "\"" : ", \"") << op.inputs[i] << "\"";
    }
    out << "]\n";
  } else {
    out << "input = \"" << op.inputs[0] << "\"\n";
  }
  out << "output = \"" << op.output << "\"\n";
  if (!op.weight.empty()) {
    out << "weight = \"" << op.weight << "\"\n";
  }
  if (!op.bias.empty()) {
    out << "bias = \"" << op.bias << "\"\n";
  }
  auto pair = [&](const char* key, const std::array<int64_t, 2>& v) {
    out << key << " = [" << v[0] << ", " << v[1] << "]\n";
  };
  switch (op.kind) {
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
    case OpKind::kReduceMean:
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kConcat:
      out << "axis = " << op.axis << "\n";
      break;
    case OpKind::kArgMax:
      out << "axis = " << op.axis << "\n" << (op.last_index ? "last_index = true\n" : "");
      break;
    case OpKind::kLeakyRelu:
      out << "alpha = " << Number(op.alpha) << "\n";
      break;
    case OpKind::kHardSigmoid:
      out << "alpha = " << Number(op.alpha) << "\nbeta = " << Number(op.beta) << "\n";
      break;
    case OpKind::kLayerNorm:
      out << "eps = " << Number(op.eps) << "\n";
      break;
    case OpKind::kConv2d:
      pair("stride", op.stride);
      pair("padding", op.padding);
      if (op.groups != 1) {
        out << "groups = " << op.groups << "\n";
      }
      break;
    case OpKind::kClip:
      out << "min = " << Number(op.min) << "\nmax = " << Number(op.max) << "\n";
      break;
    case OpKind::kMaxPool2d:
    case OpKind::kAvgPool2d:
      pair("kernel", op.kernel);
      pair("stride", op.stride);
      pair("padding", op.padding);
      if (op.ceil) {
        out << "ceil = true\n";
      }
      if (op.count_pad) {
        out << "count_pad = true\n";
      }
      break;
    case OpKind::kReshape:
      out << "shape = " << ShapeToString(op.shape) << "\n";
      break;
    case OpKind::kSlice:
      out << "axis = " << op.axis << "\nstart = " << op.start << "\nend = " << op.end << "\n";
      break;
    case OpKind::kTranspose:
      out << "perm = " << ShapeToString(op.perm) << "\n";
      break;
    case OpKind::kAdd:
    case OpKind::kSub:
    case OpKind::kMul:
    case OpKind::kDiv:
      if (op.reverse) {
        out << "reverse = true\n";
      }
      break;
    default:
      break;
  }
}

Status WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) {
    return Internal(path.string() + ": write failed");
  }
  return OkStatus();
}

}  // namespace

Result<std::vector<ConstTensor>> FoldGraph(const OnnxModel& model) {
  ImportOptions options{"fold", {1}};
  return Converter(model, options).Fold();
}

Result<ImportedModel> ConvertOnnx(const OnnxModel& model, const ImportOptions& options) {
  Converter converter(model, options);
  return converter.Run();
}

std::string ManifestToml(const Manifest& m) {
  std::ostringstream out;
  out << "# Imported from ONNX by `ferryctl import`.\nname = \"" << m.name
      << "\"\nversion = " << m.version << "\n";
  WriteTensors(out, "inputs", m.inputs);
  WriteTensors(out, "outputs", m.outputs);
  out << "\n[batching]\nsizes = " << ShapeToString(m.batch_sizes) << "\n";
  for (const Op& op : m.program) {
    WriteOp(out, op);
  }
  return out.str();
}

Status WriteBundle(const ImportedModel& model, const std::string& dir) {
  std::error_code ec;
  fs::path target(dir);
  if (fs::exists(fs::symlink_status(target, ec))) {
    return InvalidArgument(dir + ": already exists (ferryctl import writes a new directory)");
  }
  fs::path staging = target;
  staging += ".import-" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  if (!fs::create_directories(staging, ec)) {
    return Internal(staging.string() + ": cannot create: " + ec.message());
  }
  Status written = WriteFile(staging / "manifest.toml", ManifestToml(model.manifest));
  if (written.ok()) {
    written = WriteFile(staging / "weights.safetensors", EncodeSafetensors(model.weights));
  }
  if (written.ok()) {
    fs::rename(staging, target, ec);
    if (ec) {
      written = Internal(dir + ": cannot rename the new bundle into place: " + ec.message());
    }
  }
  if (!written.ok()) {
    fs::remove_all(staging, ec);
  }
  return written;
}

}  // namespace ferry::onnx_import
