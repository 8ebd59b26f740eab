// `ferryctl import MODEL.onnx --out REPO/NAME`: converts an ONNX file into a model bundle
// (manifest.toml + weights.safetensors) that a node serves, then loads the written bundle as
// a worker would, so what it writes is known to validate.
//
// Thread safety: safe for concurrent use with distinct output directories.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ferry::ctl {

struct ImportCommand {
  std::string onnx_path;
  std::string out_dir;                                // Must not exist; its name is the model's.
  std::string name;                                   // Optional; must equal out_dir's last part.
  std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32};  // Compiled batch sizes.
};

// Returns the process exit code: 0 when the bundle was written and validates; 2 for a bad
// command line, an ONNX file ferry cannot convert, or a failed write (the reason on `err`).
int RunImport(const ImportCommand& command, std::ostream& out, std::ostream& err);

}  // namespace ferry::ctl
