// What one simulation run keeps as it goes: the arrival streams' generators (a portable
// random number generator, Poisson, bursts, traces, closed-loop clients), the requests they
// issued, and per-model and per-stream tallies for the report (simulator.cc).
//
// Thread safety: plain data, one run's thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "bench/sim/scenario.h"
#include "worker/scheduler/scheduler.h"
#include "worker/scheduler/wait_histogram.h"

namespace ferry::sim {

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

inline Nanos ToNanos(double seconds) { return static_cast<Nanos>(std::llround(seconds * 1e9)); }

// One arrival stream's generator state.
struct Stream {
  int model;
  const ArrivalSpec* spec;
  Rng rng;
  double next = kNever;  // Seconds; kNever when exhausted.
  size_t emitted = 0;
  std::vector<double> client_next;  // kClosed: when each client issues next (kNever: waiting).
  int64_t queued = 0;               // Its pieces queued now (kSaturate tops these up).

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
      case ArrivalSpec::Kind::kClosed:
        if (first) {
          client_next.assign(static_cast<size_t>(spec->clients), spec->start_seconds);
        }
        next = *std::min_element(client_next.begin(), client_next.end());
        break;
      case ArrivalSpec::Kind::kSaturate:
        next = kNever;  // Topped up by the loop instead.
        break;
    }
    if (next >= spec->stop_seconds) {
      next = kNever;
    }
  }
  double Think() {
    return spec->think_seconds > 0 ? -std::log(1.0 - rng.Uniform()) * spec->think_seconds : 0;
  }
};

struct StreamTally {
  uint64_t completed = 0, met = 0, missed = 0, dropped = 0;
  uint64_t good_rows = 0;
};

// The most pieces one request may be cut into: a node's ring capacity (shm::SegmentLayout),
// since a request's pieces are all sent at once.
constexpr size_t kMaxPiecesPerRequest = 1024;

// A request as issued by a stream: split into pieces when larger than the largest size.
struct Issued {
  size_t stream;
  int client;  // kClosed: the client waiting for it; -1 otherwise.
  int64_t rows;
  int pieces_left;
  bool late = false;
  bool lost = false;
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
  Nanos max_wait = 0;
  std::map<int64_t, uint64_t> sizes;
  // Lag: over the whole run.
  Nanos last_end = 0;
  Nanos backlog_start = 0;
  Nanos longest_gap = 0;
  double longest_dispatch = 0;
  double min_weight = std::numeric_limits<double>::infinity();
  double max_weight = 0;
};

inline double Percentile(std::vector<double>& samples, double fraction) {
  if (samples.empty()) {
    return 0;
  }
  size_t k = static_cast<size_t>(fraction * static_cast<double>(samples.size() - 1));
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(k),
                   samples.end());
  return samples[k];
}

}  // namespace ferry::sim
