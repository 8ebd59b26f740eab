// `ferryctl infer`: one request to a running node over its KServe v2 HTTP front end (the
// address from ferryd's status, or given), inputs from .npy files, outputs printed (and
// optionally written as .npy).
//
// Thread safety: call from one thread.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ferry::ctl {

struct InferOptions {
  std::string socket;  // ferryd's control socket, to find the HTTP address.
  std::string url;     // HOST:PORT; empty: ask ferryd.
  std::string model;
  std::vector<std::string> inputs;  // "FILE.npy" (the model's first input) or "NAME=FILE.npy".
  int64_t deadline_ms = 0;          // 0: none.
  std::string output_dir;           // Write OUTPUT.npy files here when set.
  bool json = false;
};

// 0 on success; 1 when the node refused or could not be reached (the reason on `err`);
// 2 for unusable inputs.
int RunInfer(const InferOptions& options, std::ostream& out, std::ostream& err);

}  // namespace ferry::ctl
