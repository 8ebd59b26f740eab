// The node's Prometheus metrics, in the text exposition format (version 0.0.4), built from
// what every process publishes in shared memory (status snapshots and arena accounting, read
// without locks) and the supervisor's own counts. Served by ferryd on [node.listen] metrics
// at /metrics; `promtool check metrics` finds no problem with it (tested).
//
// Names: ferry_<what>[_<unit>][_total]; labels model, gpu (the worker's index), kind and index
// for processes. docs/metrics.md lists every metric.
//
// Thread safety: safe from any thread (reads only shared memory and atomics).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "shm/segment.h"

namespace ferry::supervisor {

// What ferryd knows of its children beyond shared memory, updated by its main thread.
struct SupervisorCounters {
  explicit SupervisorCounters(size_t slots, std::vector<std::string> tenant_names = {})
      : restarts(slots), up(slots), tenants(std::move(tenant_names)) {}
  std::vector<std::atomic<uint64_t>> restarts;  // By slot.
  std::vector<std::atomic<bool>> up;            // By slot: running and ready.
  std::atomic<bool> ready{false};
  std::vector<std::string> tenants;  // [frontend] tenants: tenant number n is tenants[n - 1].
  // Traced requests by what became of them (traces.cc copies them each tick): exported,
  // failed (the collector did not take their batch), dropped (a full ring or queue), refused
  // (a hook host wrote a span that is not one).
  std::atomic<uint64_t> traces_exported{0};
  std::atomic<uint64_t> traces_failed{0};
  std::atomic<uint64_t> traces_dropped{0};
  std::atomic<uint64_t> traces_refused{0};
};

std::string RenderMetrics(const shm::Segment& segment, const SupervisorCounters& counters);

}  // namespace ferry::supervisor
