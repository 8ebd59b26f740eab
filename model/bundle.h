// A model bundle: a directory holding manifest.toml, weights.safetensors and, optionally, a
// hook plugin. LoadBundle validates all of it: the manifest's structure, the safetensors
// file, and shape inference for every variant at every compiled batch size against the
// weights' dtypes and shapes. A bundle that loads is one every backend can run.
//
// Thread safety: immutable after LoadBundle; safe for concurrent use.
#pragma once

#include <map>
#include <string>

#include "common/result.h"
#include "model/manifest.h"
#include "model/safetensors.h"

namespace ferry {

struct Bundle {
  std::string dir;
  Manifest manifest;
  SafetensorsFile weights;
  std::string plugin_path;  // Absolute path of the hook plugin; empty when there is none.
};

// INVALID_ARGUMENT / NOT_FOUND naming the bundle and, for program errors, the op index and
// tensor. The manifest's name must equal the directory's name or, in a version directory
// (named by a version number), its parent's; the version is then the directory's number.
Result<Bundle> LoadBundle(const std::string& dir);

// Shape inference for every (variant, compiled size) against `weights`. Returns every
// distinct failure, one per line.
Status ValidateProgram(const Manifest& manifest, const SafetensorsIndex& weights);

}  // namespace ferry
