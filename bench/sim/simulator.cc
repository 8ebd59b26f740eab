#include "bench/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace ferry::sim {
namespace {

// SplitMix64: small, fast and the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Normal() {                                                           // Box-Muller.
    double u = 1.0 - Uniform();
    double v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2 * M_PI * v);
  }
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }

 private:
  uint64_t state_;
};

constexpr double kNever = std::numeric_limits<double>::infinity();

Nanos ToNanos(double seconds) { return static_cast<Nanos>(std::llround(seconds * 1e9)); }

// One arrival stream's generator state.
struct Stream {
  int model;
  const ArrivalSpec* spec;
  Rng rng;
  double next = kNever;  // Seconds; kNever when exhausted.
  size_t emitted = 0;

  void Advance(bool first) {
    switch (spec->kind) {
      case ArrivalSpec::Kind::kPoisson: {
        double base = first ? spec->start_seconds : next;
        next = base - std::log(1.0 - rng.Uniform()) / spec->rate;
        break;
      }
      case ArrivalSpec::Kind::kBurst:
        next = emitted < static_cast<size_t>(spec->count) ? spec->at_seconds : kNever;
        break;
      case ArrivalSpec::Kind::kTrace:
        next = emitted < spec->trace.size() ? spec->trace[emitted].time_seconds : kNever;
        break;
      case ArrivalSpec::Kind::kSaturate:
        next = kNever;  // Topped up by the loop instead.
        break;
    }
    if (next >= spec->stop_seconds) {
      next = kNever;
    }
  }
};

struct ModelTally {
  double gpu_seconds = 0;
  uint64_t rows = 0;
  uint64_t good_rows = 0;
  uint64_t misses = 0;
  uint64_t dropped = 0;
  uint64_t rejected = 0;
  uint64_t dispatches = 0;
  uint64_t completed = 0;
  WaitHistogram waits;
};

double Percentile(std::vector<double>& samples, double fraction) {
  if (samples.empty()) {
    return 0;
  }
  size_t k = static_cast<size_t>(fraction * static_cast<double>(samples.size() - 1));
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(k),
                   samples.end());
  return samples[k];
}

}  // namespace

Result<RunReport> RunOnce(const Scenario& scenario, const SchedulerConfig& config,
                          SchedulerOptions options, const std::string& label) {
  std::vector<ModelSpec> specs;
  for (const SimModel& m : scenario.models) {
    ModelSpec spec;
    spec.name = m.name;
    spec.batch_sizes = m.sizes;
    spec.wire_batch_input = "input";
    spec.wire_batch_axis = 1;
    specs.push_back(std::move(spec));
  }
  FERRY_ASSIGN_OR_RETURN(Scheduler scheduler, Scheduler::Create(config, specs, options));
  const size_t n = scenario.models.size();

  std::vector<Stream> streams;
  for (size_t m = 0; m < n; ++m) {
    for (size_t a = 0; a < scenario.models[m].arrivals.size(); ++a) {
      Stream stream{static_cast<int>(m), &scenario.models[m].arrivals[a],
                    Rng(scenario.seed * 1000003 + m * 1009 + a), kNever, 0};
      stream.Advance(true);
      streams.push_back(stream);
    }
  }
  Rng noise_rng(scenario.seed ^ 0x5eedf00dULL);
  auto run_cost = [&](int model, int64_t size) {
    const CostSpec& cost = scenario.models[static_cast<size_t>(model)].cost;
    double factor = cost.noise > 0 ? std::max(0.05, 1.0 + cost.noise * noise_rng.Normal()) : 1;
    return cost.Mean(size) * factor;
  };

  // Warm-up: under fair, every compiled size runs once on zero inputs to seed its cost.
  for (const WarmupRun& run : scheduler.WarmupPlan()) {
    scheduler.SeedCost(run.model, run.variant, run.batch_size, run_cost(run.model, run.batch_size));
  }

  const Nanos warmup = ToNanos(scenario.warmup_seconds);
  const Nanos end = ToNanos(scenario.duration_seconds);
  std::vector<ModelTally> tally(n);
  std::vector<double> decision_ns;
  double busy = 0;
  double missed_gpu = 0;
  uint64_t executed_rows = 0;
  uint64_t padding_rows = 0;
  uint64_t payload = 0;
  Nanos now = 0;

  auto enqueue = [&](int model, const ArrivalSpec& spec, Rng& rng, Nanos at,
                     std::optional<double> deadline_override, int64_t rows_override) {
    QueuedRequest r;
    r.payload = payload++;
    r.arrival = at;
    r.rows = rows_override > 0 ? rows_override : rng.Between(spec.rows_min, spec.rows_max);
    std::optional<double> deadline = deadline_override ? deadline_override : spec.deadline_seconds;
    if (deadline) {
      r.deadline = at + ToNanos(*deadline);
    }
    if (!scheduler.Enqueue(model, r).ok() && at >= warmup) {
      ++tally[static_cast<size_t>(model)].rejected;
      ++tally[static_cast<size_t>(model)].dropped;
    }
  };

  while (now < end) {
    for (Stream& s : streams) {
      while (s.next != kNever && ToNanos(s.next) <= now) {
        Nanos at = ToNanos(s.next);
        if (s.spec->kind == ArrivalSpec::Kind::kTrace) {
          const TraceEvent& e = s.spec->trace[s.emitted];
          enqueue(s.model, *s.spec, s.rng, at, e.deadline_seconds, e.rows);
        } else {
          enqueue(s.model, *s.spec, s.rng, at, std::nullopt, 0);
        }
        ++s.emitted;
        s.Advance(false);
      }
      if (s.spec->kind == ArrivalSpec::Kind::kSaturate && now >= ToNanos(s.spec->start_seconds) &&
          static_cast<double>(now) < s.spec->stop_seconds * 1e9) {
        for (size_t d = scheduler.queue_depth(s.model); d < static_cast<size_t>(s.spec->backlog);
             ++d) {
          enqueue(s.model, *s.spec, s.rng, now, std::nullopt, 0);
        }
      }
    }

    auto t0 = std::chrono::steady_clock::now();
    Decision decision = scheduler.Next(now);
    auto t1 = std::chrono::steady_clock::now();
    const Dispatch& d = decision.dispatch;
    if (d.runs() || !d.shed.empty() || !d.failed.empty()) {
      decision_ns.push_back(static_cast<double>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
    }
    bool measured = now >= warmup;
    for (const std::vector<QueuedRequest>* lost : {&d.shed, &d.failed}) {
      for (const QueuedRequest& r : *lost) {
        if (measured && r.arrival >= warmup) {
          ++tally[static_cast<size_t>(d.model)].dropped;
        }
      }
    }
    if (d.runs()) {
      double seconds = run_cost(d.model, d.batch_size);
      Nanos finish = now + ToNanos(seconds);
      ModelTally& t = tally[static_cast<size_t>(d.model)];
      if (measured) {
        busy += seconds;
        t.gpu_seconds += seconds;
        ++t.dispatches;
        executed_rows += static_cast<uint64_t>(d.batch_size);
        padding_rows += static_cast<uint64_t>(d.batch_size - d.rows);
        int64_t missed_rows = 0;
        for (const QueuedRequest& r : d.requests) {
          t.waits.Record(now - r.arrival);
          ++t.completed;
          t.rows += static_cast<uint64_t>(r.rows);
          if (r.deadline && finish > *r.deadline) {
            ++t.misses;
            missed_rows += r.rows;
          } else {
            t.good_rows += static_cast<uint64_t>(r.rows);
          }
        }
        missed_gpu += seconds * static_cast<double>(missed_rows) / static_cast<double>(d.rows);
      }
      now = finish;
      scheduler.Complete(d, seconds, now);
      continue;
    }
    if (scheduler.queued_requests() > 0) {
      continue;  // Everything selected was shed: decide again at once.
    }
    // Idle: jump to the next arrival (or the start of a saturating stream).
    double next = kNever;
    for (const Stream& s : streams) {
      next = std::min(next, s.next);
      if (s.spec->kind == ArrivalSpec::Kind::kSaturate &&
          static_cast<double>(now) < s.spec->start_seconds * 1e9) {
        next = std::min(next, s.spec->start_seconds);
      }
    }
    if (next == kNever || ToNanos(next) >= end) {
      break;
    }
    now = std::max(now + 1, ToNanos(next));
  }
  // A dispatch may end after `end`; the window is what was measured.
  double window =
      std::max(scenario.duration_seconds, static_cast<double>(now) / 1e9) - scenario.warmup_seconds;

  RunReport report;
  report.label = label;
  double weight_with_traffic = 0;
  for (const SimModel& m : scenario.models) {
    if (!m.arrivals.empty()) {
      weight_with_traffic += m.weight;
    }
  }
  double x_sum = 0, x_sq = 0, best_capacity = 0, goodput = 0;
  int with_traffic = 0;
  for (size_t i = 0; i < n; ++i) {
    const SimModel& m = scenario.models[i];
    const ModelTally& t = tally[i];
    ModelReport r;
    r.name = m.name;
    r.weight = m.weight;
    r.share = busy > 0 ? t.gpu_seconds / busy : 0;
    r.target_share = m.arrivals.empty() ? 0 : m.weight / weight_with_traffic;
    r.throughput_rows_per_s = static_cast<double>(t.rows) / window;
    r.goodput_rows_per_s = static_cast<double>(t.good_rows) / window;
    for (int64_t size : m.sizes) {
      r.capacity_rows_per_s =
          std::max(r.capacity_rows_per_s, static_cast<double>(size) / m.cost.Mean(size));
    }
    r.queue_wait_p50_s = static_cast<double>(t.waits.Percentile(0.50)) / 1e9;
    r.queue_wait_p99_s = static_cast<double>(t.waits.Percentile(0.99)) / 1e9;
    r.deadline_misses = t.misses;
    r.dropped = t.dropped;
    r.rejected = t.rejected;
    r.dispatches = t.dispatches;
    r.requests_completed = t.completed;
    r.gpu_seconds = t.gpu_seconds;
    if (r.target_share > 0) {
      double x = r.share / r.target_share;
      x_sum += x;
      x_sq += x * x;
      ++with_traffic;
    }
    best_capacity = std::max(best_capacity, r.capacity_rows_per_s);
    goodput += r.goodput_rows_per_s;
    report.models.push_back(std::move(r));
  }
  report.jain = x_sq > 0 ? x_sum * x_sum / (with_traffic * x_sq) : 0;
  report.utilization = busy / window;
  report.padding_waste =
      executed_rows > 0 ? static_cast<double>(padding_rows) / static_cast<double>(executed_rows)
                        : 0;
  report.missed_gpu_fraction = busy > 0 ? missed_gpu / busy : 0;
  report.goodput_vs_capacity = best_capacity > 0 ? goodput / best_capacity : 0;
  report.decisions = decision_ns.size();
  report.decision_ns_median = Percentile(decision_ns, 0.5);
  report.decision_ns_p99 = Percentile(decision_ns, 0.99);
  return report;
}

Result<ScenarioReport> RunScenario(const Scenario& scenario) {
  ScenarioReport report;
  report.scenario = scenario.name;
  FERRY_ASSIGN_OR_RETURN(
      report.ferry, RunOnce(scenario, scenario.scheduler, {},
                            "ferry " + std::string(DisciplineName(scenario.scheduler.discipline))));
  for (const Alternative& alternative : scenario.alternatives) {
    FERRY_ASSIGN_OR_RETURN(RunReport run,
                           RunOnce(scenario, alternative.scheduler, {}, alternative.label));
    report.alternatives.push_back(std::move(run));
  }
  if (scenario.baselines) {
    FERRY_ASSIGN_OR_RETURN(
        RunReport no_coalescing,
        RunOnce(scenario, scenario.scheduler, {.coalesce = false}, "baseline: no coalescing"));
    FERRY_ASSIGN_OR_RETURN(
        RunReport round_robin,
        RunOnce(scenario, scenario.scheduler, {.round_robin = true}, "baseline: round robin"));
    report.baselines.push_back(std::move(no_coalescing));
    report.baselines.push_back(std::move(round_robin));
  }
  return report;
}

}  // namespace ferry::sim
