#include "bench/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "bench/sim/sim_residency.h"
#include "bench/sim/sim_tallies.h"
#include "worker/scheduler/request_splitting.h"

namespace ferry::sim {
namespace {

// One run of a scenario under one configuration, on virtual time: streams issue requests, the
// scheduler decides, dispatches take their modelled cost, and tallies are kept for the report.
struct SimRun {
  SimRun(const Scenario& scenario, const SchedulerConfig& config, SchedulerOptions options,
         Scheduler scheduler, std::vector<TraceRow>* trace)
      : scenario(scenario),
        config(config),
        options(options),
        scheduler(std::move(scheduler)),
        trace(trace),
        n(scenario.models.size()),
        noise_rng(scenario.seed ^ 0x5eedf00dULL),
        warmup(ToNanos(scenario.warmup_seconds)),
        end(ToNanos(scenario.duration_seconds)),
        window_ns(std::max<Nanos>(1, ToNanos(scenario.share_window_seconds))),
        tenants(scenario) {
    for (size_t m = 0; m < n; ++m) {
      for (size_t a = 0; a < scenario.models[m].arrivals.size(); ++a) {
        Stream stream{static_cast<int>(m),
                      &scenario.models[m].arrivals[a],
                      Rng(scenario.seed * 1000003 + m * 1009 + a),
                      kNever,
                      0,
                      {}};
        stream.Advance(true);
        streams.push_back(stream);
      }
    }
    tally.resize(n);
    stream_tally.resize(streams.size());
    for (size_t i = 0; i < n; ++i) {
      tally[i].min_weight = tally[i].max_weight = config.ForModel(scenario.models[i].name).weight;
    }
  }

  // A dispatch's modelled time: the model's cost at `size`, with its noise and drift.
  double RunCost(int model, int64_t size) {
    const CostSpec& cost = scenario.models[static_cast<size_t>(model)].cost;
    double factor = cost.noise > 0 ? std::max(0.05, 1.0 + cost.noise * noise_rng.Normal()) : 1;
    double drift = std::max(0.05, 1.0 + cost.drift_per_second * static_cast<double>(now) / 1e9);
    return cost.Mean(std::max<int64_t>(size, 1)) * factor * drift;
  }

  // Warm-up: under fair, every compiled size runs once on zero inputs to seed its cost.
  void WarmUp() {
    for (const WarmupRun& run : scheduler.WarmupPlan()) {
      double measured = RunCost(run.model, run.batch_size) *
                        scenario.models[static_cast<size_t>(run.model)].cost.warmup_factor;
      scheduler.SeedCost(run.model, run.variant, run.batch_size, measured);
    }
  }

  // Adds [from, to) to `model`'s entry of each share window it spans.
  void Account(std::vector<std::vector<double>>& series, size_t model, Nanos from, Nanos to) {
    while (from < to) {
      size_t w = static_cast<size_t>(from / window_ns);
      if (series.size() <= w) {
        series.resize(w + 1, std::vector<double>(n, 0.0));
      }
      Nanos cut = std::min(to, static_cast<Nanos>(w + 1) * window_ns);
      series[w][model] += static_cast<double>(cut - from) / 1e9;
      from = cut;
    }
  }

  // A request of a stream is finished (all pieces run, or lost); a closed-loop client then
  // thinks and issues its next request.
  void FinishRequest(Issued& r, Nanos at) {
    StreamTally& st = stream_tally[r.stream];
    bool measured = at >= warmup;
    if (measured) {
      if (r.lost) {
        ++st.dropped;
      } else {
        ++st.completed;
        if (r.late) {
          ++st.missed;
        } else {
          ++st.met;
          st.good_rows += static_cast<uint64_t>(r.rows);
        }
      }
    }
    if (r.client >= 0) {
      Stream& s = streams[r.stream];
      // A refused request retries no sooner than 1 ms later, so a full queue cannot spin.
      double pause = std::max(s.Think(), r.lost ? 0.001 : 0.0);
      s.client_next[static_cast<size_t>(r.client)] = static_cast<double>(at) / 1e9 + pause;
      s.Advance(false);
    }
  }

  void Issue(size_t stream_index, Nanos at, std::optional<double> deadline_override,
             int64_t rows_override, int client) {
    Stream& s = streams[stream_index];
    const ArrivalSpec& spec = *s.spec;
    int model = s.model;
    const SimModel& sm = scenario.models[static_cast<size_t>(model)];
    QueuedRequest r;
    r.payload = issued.size();
    r.arrival = at;
    r.variant = spec.variant;
    r.tenant = spec.tenant;
    r.priority = spec.priority;
    r.rows = rows_override > 0 ? rows_override : s.rng.Between(spec.rows_min, spec.rows_max);
    std::optional<double> deadline = deadline_override ? deadline_override : spec.deadline_seconds;
    if (deadline) {
      r.deadline = at + ToNanos(*deadline);
    }
    // Larger than the largest compiled size: cut by the hook host's own rule (PlanSplit: all
    // pieces or none; refused like a full queue when it cannot be).
    Result<std::vector<int64_t>> plan =
        PlanSplit(sm.name, r.rows, sm.sizes.back(), "", kMaxPiecesPerRequest);
    std::vector<int64_t> pieces = plan.ok() ? *plan : std::vector<int64_t>{};
    issued.push_back({stream_index, client, r.rows, static_cast<int>(pieces.size())});
    ModelTally& t = tally[static_cast<size_t>(model)];
    if (scheduler.queue_depth(model) == 0) {
      t.backlog_start = at;
    }
    std::vector<QueuedRequest> parts = SplitRequest(r, pieces);
    if (!plan.ok() || !scheduler.EnqueueAll(model, parts).ok()) {
      if (at >= warmup) {
        ++t.rejected;
        ++t.dropped;
      }
      issued.back().lost = true;
      FinishRequest(issued.back(), at);
    } else {
      tenants.Queued(spec.tenant, parts.size(), at);
      s.queued += static_cast<int64_t>(parts.size());
    }
  }

  // Control events due now.
  Status ApplyEvents() {
    while (next_event < scenario.events.size() &&
           ToNanos(scenario.events[next_event].at_seconds) <= now) {
      const ControlEvent& e = scenario.events[next_event++];
      if (e.kind == ControlEvent::Kind::kSetPolicy) {
        FERRY_RETURN_IF_ERROR(scheduler.SetPolicy(e.model, e.weight));
        ModelTally& t = tally[static_cast<size_t>(scheduler.FindModel(e.model))];
        t.min_weight = std::min(t.min_weight, e.weight);
        t.max_weight = std::max(t.max_weight, e.weight);
      } else if (!options.round_robin) {
        FERRY_RETURN_IF_ERROR(scheduler.SetDiscipline(e.discipline));
      }
    }
    return OkStatus();
  }

  // Arrivals due now, and saturating streams topped up to their backlog.
  void IssueArrivals() {
    for (size_t si = 0; si < streams.size(); ++si) {
      Stream& s = streams[si];
      while (s.next != kNever && ToNanos(s.next) <= now) {
        Nanos at = ToNanos(s.next);
        if (s.spec->kind == ArrivalSpec::Kind::kTrace) {
          const TraceEvent& e = s.spec->trace[s.emitted];
          Issue(si, at, e.deadline_seconds, e.rows, -1);
          ++s.emitted;
          s.Advance(false);
        } else if (s.spec->kind == ArrivalSpec::Kind::kClosed) {
          auto client = std::min_element(s.client_next.begin(), s.client_next.end());
          *client = kNever;  // Waiting for its reply.
          s.Advance(false);
          Issue(si, at, std::nullopt, 0, static_cast<int>(client - s.client_next.begin()));
        } else {
          Issue(si, at, std::nullopt, 0, -1);
          ++s.emitted;
          s.Advance(false);
        }
      }
      if (s.spec->kind == ArrivalSpec::Kind::kSaturate && now >= ToNanos(s.spec->start_seconds) &&
          static_cast<double>(now) < s.spec->stop_seconds * 1e9) {
        while (s.queued < s.spec->backlog) {
          int64_t before = s.queued;
          Issue(si, now, std::nullopt, 0, -1);
          if (s.queued == before) {
            break;  // Refused (a full queue): topped up again after the next decision.
          }
        }
      }
    }
  }

  // Requests shed or failed by decision `d`.
  void Lose(const Dispatch& d, bool measured) {
    for (const std::vector<QueuedRequest>* lost : {&d.shed, &d.failed}) {
      for (const QueuedRequest& r : *lost) {
        if (measured && r.arrival >= warmup) {
          ++tally[static_cast<size_t>(d.model)].dropped;
        }
        tenants.Left(r, now);
        Issued& whole = issued[r.payload];
        --streams[whole.stream].queued;
        whole.lost = true;
        if (--whole.pieces_left == 0) {
          FinishRequest(whole, now);
        }
      }
    }
  }

  // Runs decision `d`'s batch: its modelled time passes, and its requests are tallied.
  void Execute(const Dispatch& d, bool measured) {
    double seconds = RunCost(d.model, d.batch_size);
    Nanos finish = now + ToNanos(seconds);
    ModelTally& t = tally[static_cast<size_t>(d.model)];
    t.longest_gap = std::max(t.longest_gap, now - std::max(t.last_end, t.backlog_start));
    t.longest_dispatch = std::max(t.longest_dispatch, seconds);
    t.last_end = finish;
    if (trace != nullptr) {
      trace->push_back({static_cast<double>(now) / 1e9, static_cast<double>(finish) / 1e9, d.model,
                        d.variant, d.batch_size, d.rows, d.requests.size()});
    }
    Account(window_gpu, static_cast<size_t>(d.model), now, finish);
    tenants.Ran(d, now, finish, seconds, measured);
    for (size_t i = 0; i < n; ++i) {
      if (static_cast<int>(i) == d.model || scheduler.queue_depth(static_cast<int>(i)) > 0) {
        Account(window_backlog, i, now, finish);
      }
    }
    if (measured) {
      busy += seconds;
      t.gpu_seconds += seconds;
      ++t.dispatches;
      ++t.sizes[d.batch_size];
      executed_rows += static_cast<uint64_t>(d.batch_size);
      padding_rows += static_cast<uint64_t>(std::max<int64_t>(0, d.batch_size - d.rows));
    }
    int64_t missed_rows = 0;
    for (const QueuedRequest& r : d.requests) {
      bool late = r.deadline && finish > *r.deadline;
      if (measured) {
        t.waits.Record(now - r.arrival);
        t.max_wait = std::max(t.max_wait, now - r.arrival);
        ++t.completed;
        t.rows += static_cast<uint64_t>(r.rows);
        if (late) {
          ++t.misses;
          missed_rows += r.rows;
        } else {
          t.good_rows += static_cast<uint64_t>(r.rows);
        }
      }
      Issued& whole = issued[r.payload];
      --streams[whole.stream].queued;
      whole.late = whole.late || late;
      if (--whole.pieces_left == 0) {
        FinishRequest(whole, finish);
      }
    }
    if (measured && d.rows > 0) {
      missed_gpu += seconds * static_cast<double>(missed_rows) / static_cast<double>(d.rows);
    }
    now = finish;
    scheduler.Complete(d, seconds, now);
  }

  // Idle: the time of the next arrival, event, or start of a saturating stream (kNever: none).
  double NextWake() const {
    double next = kNever;
    for (const Stream& s : streams) {
      next = std::min(next, s.next);
      if (s.spec->kind == ArrivalSpec::Kind::kSaturate &&
          static_cast<double>(now) < s.spec->start_seconds * 1e9) {
        next = std::min(next, s.spec->start_seconds);
      }
    }
    if (next_event < scenario.events.size()) {
      next = std::min(next, scenario.events[next_event].at_seconds);
    }
    if (residency != nullptr && residency->next_event() != SimResidency::kNoEvent) {
      next = std::min(next, static_cast<double>(residency->next_event()) / 1e9);
    }
    return next;
  }

  Status Loop() {
    while (now < end) {
      FERRY_RETURN_IF_ERROR(ApplyEvents());
      IssueArrivals();
      if (residency != nullptr) {
        residency->Advance(now);
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
      if (!d.runs() && d.model >= 0 && scheduler.queue_depth(d.model) == 0 &&
          (!d.shed.empty() || !d.failed.empty())) {
        // Its backlog ended by shedding, not by a dispatch: that wait counts as a gap too.
        ModelTally& t = tally[static_cast<size_t>(d.model)];
        t.longest_gap = std::max(t.longest_gap, now - std::max(t.last_end, t.backlog_start));
      }
      Lose(d, measured);
      if (d.runs()) {
        if (residency != nullptr) {
          residency->Touch(d.model);
        }
        Execute(d, measured);
        continue;
      }
      if (scheduler.HasRunnable() || !d.shed.empty() || !d.failed.empty()) {
        continue;  // Everything selected was shed: decide again at once.
      }
      double next = NextWake();
      if (next == kNever || ToNanos(next) >= end) {
        break;
      }
      now = std::max(now + 1, ToNanos(next));
    }
    // A backlog still waiting at the end closes its gap there.
    tenants.Close(now);
    for (size_t i = 0; i < n; ++i) {
      if (scheduler.queue_depth(static_cast<int>(i)) > 0) {
        ModelTally& t = tally[i];
        t.longest_gap = std::max(t.longest_gap, now - std::max(t.last_end, t.backlog_start));
      }
    }
    return OkStatus();
  }

  RunReport Report(const std::string& label) {
    // A dispatch may end after `end`; the window is what was measured.
    double window = std::max(scenario.duration_seconds, static_cast<double>(now) / 1e9) -
                    scenario.warmup_seconds;

    RunReport report;
    report.label = label;
    double weight_with_traffic = 0, max_weight_with_traffic = 0, dispatch_sum = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!scenario.models[i].arrivals.empty()) {
        weight_with_traffic += scenario.models[i].weight;
        max_weight_with_traffic += tally[i].max_weight;
        dispatch_sum += tally[i].longest_dispatch;
      }
    }
    double x_sum = 0, x_sq = 0, best_capacity = 0, goodput = 0;
    int with_traffic = 0;
    size_t stream_index = 0;
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
        int64_t rows = std::max<int64_t>(size, 1);
        r.capacity_rows_per_s =
            std::max(r.capacity_rows_per_s, static_cast<double>(rows) / m.cost.Mean(rows));
      }
      r.queue_wait_p50_s = static_cast<double>(t.waits.Percentile(0.50)) / 1e9;
      r.queue_wait_p99_s = static_cast<double>(t.waits.Percentile(0.99)) / 1e9;
      r.max_queue_wait_s = static_cast<double>(t.max_wait) / 1e9;
      if (residency != nullptr) {
        const ResidencyCounts& c = residency->counts()[i];
        r.weight_loads = c.loads;
        r.weight_evictions = c.evictions;
        r.weight_load_seconds = c.load_seconds;
      }
      r.deadline_misses = t.misses;
      r.dropped = t.dropped;
      r.rejected = t.rejected;
      r.dispatches = t.dispatches;
      r.requests_completed = t.completed;
      r.gpu_seconds = t.gpu_seconds;
      r.batch_size_histogram = t.sizes;
      r.longest_gap_s = static_cast<double>(t.longest_gap) / 1e9;
      if (!m.arrivals.empty()) {
        r.lag_bound_s = (max_weight_with_traffic / t.min_weight - 1) * t.longest_dispatch +
                        (dispatch_sum - t.longest_dispatch);
      }
      for (size_t a = 0; a < m.arrivals.size(); ++a, ++stream_index) {
        const StreamTally& st = stream_tally[stream_index];
        r.streams.push_back({m.arrivals[a].name, st.completed, st.met, st.missed, st.dropped,
                             static_cast<double>(st.good_rows) / window});
      }
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
    for (size_t w = 0; w < window_gpu.size() && w < window_backlog.size(); ++w) {
      ShareWindow sw;
      sw.start_s = static_cast<double>(w) * scenario.share_window_seconds;
      double gpu = 0, demand = 0;
      for (size_t i = 0; i < n; ++i) {
        gpu += window_gpu[w][i];
      }
      // Weights in force are the configured ones; set_policy events are reflected by the
      // caller's checks (the series is for computing properties from outside).
      std::vector<double> weights(n);
      for (size_t i = 0; i < n; ++i) {
        weights[i] = scenario.models[i].weight;
        double b = window_backlog[w][i] / scenario.share_window_seconds;
        sw.backlogged.push_back(std::min(1.0, b));
        demand += weights[i] * std::min(1.0, b);
      }
      for (size_t i = 0; i < n; ++i) {
        sw.shares.push_back(gpu > 0 ? window_gpu[w][i] / gpu : 0);
        sw.targets.push_back(demand > 0 ? weights[i] * sw.backlogged[i] / demand : 0);
      }
      report.windows.push_back(std::move(sw));
    }
    report.tenants = tenants.Tenants();
    report.priorities = tenants.Priorities();
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

  const Scenario& scenario;
  const SchedulerConfig& config;
  const SchedulerOptions options;
  Scheduler scheduler;
  std::vector<TraceRow>* trace;
  std::unique_ptr<SimResidency> residency;  // Under a weight budget only.
  const size_t n;
  std::vector<Stream> streams;
  Rng noise_rng;
  Nanos now = 0;
  const Nanos warmup;
  const Nanos end;
  const Nanos window_ns;
  std::vector<ModelTally> tally;
  std::vector<StreamTally> stream_tally;
  std::vector<Issued> issued;  // By payload.
  std::vector<double> decision_ns;
  double busy = 0;
  double missed_gpu = 0;
  uint64_t executed_rows = 0;
  uint64_t padding_rows = 0;
  size_t next_event = 0;
  // The share time series: GPU seconds and backlogged time per model per window.
  std::vector<std::vector<double>> window_gpu, window_backlog;
  TenantTallies tenants;
};

}  // namespace

Result<RunReport> RunOnce(const Scenario& scenario, const SchedulerConfig& config,
                          SchedulerOptions options, const std::string& label,
                          std::vector<TraceRow>* trace) {
  std::vector<ModelSpec> specs;
  for (const SimModel& m : scenario.models) {
    ModelSpec spec;
    spec.name = m.name;
    spec.batch_sizes = m.sizes;
    spec.num_variants = m.variants;
    spec.wire_batch_input = "input";
    spec.wire_batch_axis = 1;
    specs.push_back(std::move(spec));
  }
  FERRY_ASSIGN_OR_RETURN(Scheduler scheduler, Scheduler::Create(config, specs, options));
  auto run = std::make_unique<SimRun>(scenario, config, options, std::move(scheduler), trace);
  run->WarmUp();
  if (scenario.weight_budget > 0) {
    FERRY_ASSIGN_OR_RETURN(run->residency, SimResidency::Create(scenario, config, &run->scheduler));
  }
  FERRY_RETURN_IF_ERROR(run->Loop());
  return run->Report(label);
}
Result<ScenarioReport> RunScenario(const Scenario& scenario, std::vector<TraceRow>* trace) {
  ScenarioReport report;
  report.scenario = scenario.name;
  FERRY_ASSIGN_OR_RETURN(
      report.ferry,
      RunOnce(scenario, scenario.scheduler, {},
              "ferry " + std::string(DisciplineName(scenario.scheduler.discipline)), trace));
  for (const Alternative& alternative : scenario.alternatives) {
    Scenario varied = scenario;  // Its weight budget or eviction changed, if it says so.
    varied.weight_budget = alternative.weight_budget.value_or(scenario.weight_budget);
    varied.evict_all = alternative.evict_all.value_or(scenario.evict_all);
    FERRY_ASSIGN_OR_RETURN(RunReport run,
                           RunOnce(varied, alternative.scheduler, {}, alternative.label));
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
