// A hook host process for the multi-process tests: attaches a hook host slot, loads the
// repository and its plugins (in the load sandbox), enters the sandbox, starts a HookHost and
// sends `--requests` requests, taking the `--model`s in turn (random inputs of `--rows` rows,
// all in flight at once), then prints one line per request in submission order ("ok" or
// "CODE message") and exits 0; "unusable MESSAGE" and exit 2 when a `--model` failed to load;
// exit 1 when the setup or the sandbox failed. What a plugin does to it (a crash, a forbidden
// call) is what the test watches for.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "common/logging.h"
#include "hookhost/hookhost.h"
#include "hookhost/startup.h"

int main(int argc, char** argv) {
  using namespace ferry;
  using namespace ferry::hookhost;
  CLI::App app{"ferry-test-hookhost"};
  std::string segment_name, repository;
  std::vector<std::string> names;
  uint32_t slot = 0;
  int requests = 1, threads = 2;
  int64_t rows = 1, timeout_ms = 1000, report_restart_ms = 0;
  bool sandbox = true;
  app.add_option("--segment", segment_name)->required();
  app.add_option("--slot", slot)->required();
  app.add_option("--repository", repository)->required();
  app.add_option("--model", names)->required();
  app.add_option("--requests", requests);
  app.add_option("--rows", rows);
  app.add_option("--threads", threads);
  app.add_option("--call-timeout-ms", timeout_ms);
  app.add_option("--report-restart-ms", report_restart_ms);
  app.add_flag("!--no-sandbox", sandbox);
  CLI11_PARSE(app, argc, argv);
  (void)InitLogging("ferry-test-hookhost", LogFormat::kText,
                    "warn");  // stderr: stdout is the result.

  Result<shm::Segment> segment = shm::Segment::Attach(segment_name, slot);
  Result<LoadedModels> loaded = LoadModelsConfined(repository, std::nullopt, sandbox);
  if (!segment.ok() || !loaded.ok()) {
    std::fprintf(stderr, "setup failed: %s\n",
                 loaded.ok() ? "segment" : loaded.error().message.c_str());
    return 1;
  }
  std::vector<HookModel>* models = &loaded->models;
  // Per model, a request: every client input, random bytes of its dtype and shape.
  std::mt19937 rng(1);
  std::vector<std::vector<uint8_t>> buffers;
  buffers.reserve(64);
  std::vector<InferRequest> kinds;
  for (const std::string& name : names) {
    const HookModel* target = nullptr;
    for (const HookModel& m : *models) {
      if (m.name == name) target = &m;
    }
    if (target == nullptr) {
      std::fprintf(stderr, "model %s is not in the repository\n", name.c_str());
      return 1;
    }
    if (target->failure) {  // On stdout, for the test to read; exit 2.
      std::printf("unusable %s\n", target->failure->message.c_str());
      return 2;
    }
    InferRequest request;
    request.model = target;  // Resolved above, as the front end resolves a model.
    for (const TensorSpec& spec : target->manifest().client_inputs()) {
      Shape shape = spec.shape;
      for (int64_t& d : shape) d = d == kBatchDim ? rows : d;
      std::vector<uint8_t> bytes(TensorByteSize(spec.dtype, shape).value());
      for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
        float f = static_cast<float>(rng() % 1000) / 1000.0f;
        std::memcpy(&bytes[i], &f, 4);
      }
      buffers.push_back(std::move(bytes));
      request.inputs.push_back({spec.name, spec.dtype, shape, buffers.back()});
    }
    kinds.push_back(std::move(request));
  }
  if (sandbox) {
    Result<SandboxReport> report = Seal(*loaded);
    if (!report.ok()) {
      std::printf("sandbox: %s\n", report.error().message.c_str());
      return 1;
    }
  }
  HookHostOptions options;
  options.threads = threads;
  options.call_timeout_ms = timeout_ms;
  auto host = std::make_unique<HookHost>(*segment, slot, *models, options);
  host->Start();
  std::vector<std::future<Result<InferResponse>>> futures;
  for (int i = 0; i < requests; ++i) {
    futures.push_back(host->Submit(kinds[static_cast<size_t>(i) % kinds.size()]));
  }
  for (auto& f : futures) {
    Result<InferResponse> r = f.get();
    if (r.ok()) {
      std::printf("ok\n");
    } else {
      std::printf("%s %s\n", std::string(ErrorCodeName(r.error().code)).c_str(),
                  r.error().message.c_str());
    }
  }
  if (report_restart_ms > 0) {  // Whether a call past its limit made the host ask for a restart.
    for (int64_t waited = 0; waited < report_restart_ms && !host->wants_restart(); waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::printf("restart: %s\n", host->wants_restart() ? "yes" : "no");
  }
  std::fflush(stdout);
  if (host->timed_out_calls() == 0) {
    host.reset();  // Joins its threads and hands the workers' blocks back.
  }
  _exit(0);  // A call may still be stuck in a plugin: no joins then.
}
