// ferry-decision-bench [--json] [--decisions N]: the real time of one scheduling decision
// (Scheduler::Next: select + shed + coalesce, plus the Complete() that follows) with 8, 64
// and 512 models and 100k queued requests, for each discipline, against the plain round-robin
// baseline in the same run. After every dispatch as many requests arrive as it took, spread
// over all models in turn (not only the dispatched one), so the backlog stays at 100k and
// models keep joining and leaving the backlogged set. "edf overload": twice as many requests
// arrive as are dispatched, each with a deadline 20 ms out (one deadline class per stream,
// as in the shipped scenarios), so half of them are shed: the cost of shedding is in the
// figure. "edf overload, mixed deadlines": the same with deadlines 20 ms to 1 s out in no
// particular order (an adversarial mix for the deadline index).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "worker/scheduler/scheduler.h"

namespace {

using ferry::Discipline;
using ferry::Nanos;

enum class Overload { kNone, kOneClass, kMixed };

double MedianDecisionNs(int num_models, int queued, int decisions, Discipline discipline,
                        bool round_robin, Overload overload = Overload::kNone) {
  ferry::SchedulerConfig config;
  config.discipline = discipline;
  config.max_queue_depth = queued;
  std::vector<ferry::ModelSpec> specs;
  for (int i = 0; i < num_models; ++i) {
    ferry::ModelSpec spec;
    spec.name = "model" + std::to_string(i);
    spec.batch_sizes = {1, 8, 32};
    config.models[spec.name].weight = 1.0 + i % 4;
    specs.push_back(spec);
  }
  ferry::Result<ferry::Scheduler> created =
      ferry::Scheduler::Create(config, specs, {.coalesce = true, .round_robin = round_robin});
  ferry::Scheduler& s = created.value();
  for (int i = 0; i < num_models; ++i) {
    for (int64_t size : {1, 8, 32}) {
      s.SeedCost(i, 0, size, 1e-4 * (1 + i % 7) * (1 + static_cast<double>(size) / 8));
    }
  }
  Nanos now = 0;
  uint64_t payload = 0;
  auto push = [&](int model) {
    ferry::QueuedRequest r;
    r.payload = payload++;
    r.arrival = now;
    // Far: edf sorts but never sheds; or, overloaded, 20 ms (or 20 ms to 1 s, mixed).
    switch (overload) {
      case Overload::kNone:
        r.deadline = now + 3600 * ferry::kNanosPerSecond;
        break;
      case Overload::kOneClass:
        r.deadline = now + 20'000'000;
        break;
      case Overload::kMixed:
        r.deadline = now + 20'000'000 + static_cast<Nanos>(payload % 1000) * 1'000'000;
        break;
    }
    (void)s.Enqueue(model, r);
  };
  for (int i = 0; i < queued; ++i) {
    push(i % num_models);
  }
  int next_model = 0;
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(decisions));
  for (int i = 0; i < decisions; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    ferry::Decision d = s.Next(now);
    double seconds = 1e-4 * (1 + std::max(0, d.dispatch.model) % 7);
    if (d.dispatch.runs()) {
      s.Complete(d.dispatch, seconds, now + static_cast<Nanos>(seconds * 1e9));
    }
    auto t1 = std::chrono::steady_clock::now();
    samples.push_back(
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    if (d.dispatch.runs()) {
      now += static_cast<Nanos>(seconds * 1e9);
    } else if (s.queued_requests() == 0) {
      break;
    }
    size_t arrivals =
        overload != Overload::kNone
            ? 2 * d.dispatch.requests.size()
            : d.dispatch.requests.size() + d.dispatch.shed.size() + d.dispatch.failed.size();
    for (size_t k = 0; k < arrivals; ++k) {
      push(next_model);
      next_model = (next_model + 1) % num_models;
    }
  }
  std::nth_element(samples.begin(),
                   samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2),
                   samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ferry-decision-bench: real time per scheduling decision vs model count"};
  bool json = false;
  int decisions = 20000;
  int queued = 100000;
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--decisions", decisions, "decisions timed per configuration")
      ->check(CLI::Range(100, 10'000'000));
  app.add_option("--queued", queued, "requests kept queued")->check(CLI::Range(1000, 10'000'000));
  CLI11_PARSE(app, argc, argv);

  nlohmann::json rows = nlohmann::json::array();
  if (!json) {
    std::printf("%8s %9s %10s %10s %10s %14s %12s %12s %10s\n", "models", "queued", "fair ns",
                "fifo ns", "edf ns", "edf overload", "edf mixed", "round-robin", "fair/rr");
  }
  for (int models : {8, 64, 512}) {
    double fair = MedianDecisionNs(models, queued, decisions, Discipline::kFair, false);
    double fifo = MedianDecisionNs(models, queued, decisions, Discipline::kFifo, false);
    double edf = MedianDecisionNs(models, queued, decisions, Discipline::kEdf, false);
    double edf_overload =
        MedianDecisionNs(models, queued, decisions, Discipline::kEdf, false, Overload::kOneClass);
    double edf_mixed =
        MedianDecisionNs(models, queued, decisions, Discipline::kEdf, false, Overload::kMixed);
    double rr = MedianDecisionNs(models, queued, decisions, Discipline::kFair, true);
    rows.push_back({{"models", models},
                    {"queued", queued},
                    {"fair_ns_median", fair},
                    {"fifo_ns_median", fifo},
                    {"edf_ns_median", edf},
                    {"edf_overload_ns_median", edf_overload},
                    {"edf_overload_mixed_deadlines_ns_median", edf_mixed},
                    {"round_robin_ns_median", rr},
                    {"fair_vs_round_robin", fair / rr}});
    if (!json) {
      std::printf("%8d %9d %10.0f %10.0f %10.0f %14.0f %12.0f %12.0f %10.2f\n", models, queued,
                  fair, fifo, edf, edf_overload, edf_mixed, rr, fair / rr);
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"decision", rows}}.dump(2) << "\n";
  }
  return 0;
}
