#include "hookhost/frontend/trace_endpoint.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <random>
#include <thread>

#include "common/clock.h"

namespace ferry::frontend {

namespace {

// A setting's one string: Triton sends every value as a string, trace_level as a list.
Result<std::string> OneString(const std::string& key, const nlohmann::json& value) {
  if (value.is_string()) {
    return value.get<std::string>();
  }
  if (value.is_array() && value.size() == 1 && value[0].is_string()) {
    return value[0].get<std::string>();
  }
  return InvalidArgument("trace settings: '" + key.substr(0, 64) + "' must be a string");
}

Result<int64_t> Integer(const std::string& key, const std::string& text, int64_t low,
                        int64_t high) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    return InvalidArgument("trace settings: '" + key + "' must be an integer from " +
                           std::to_string(low) + " to " + std::to_string(high));
  }
  return value;
}

uint64_t Random64() {
  thread_local std::mt19937_64 rng(static_cast<uint64_t>(MonotonicNs()) ^
                                   std::hash<std::thread::id>()(std::this_thread::get_id()));
  uint64_t v = 0;
  while (v == 0) {
    v = rng();
  }
  return v;
}

uint64_t Hex64(std::string_view text) {
  uint64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v, 16);
  return v;
}

}  // namespace

nlohmann::json TraceSettingsJson(const TraceSettings& s) {
  return {{"trace_level", nlohmann::json::array({s.timestamps ? "TIMESTAMPS" : "OFF"})},
          {"trace_rate", std::to_string(s.rate)},
          {"trace_count", std::to_string(s.count)},
          {"log_frequency", "0"},
          {"trace_file", ""},
          {"trace_mode", "opentelemetry"}};
}

Result<TraceSettings> MergeTraceSettings(const TraceSettings& base, const nlohmann::json& changes) {
  if (!changes.is_object()) {
    return InvalidArgument("trace settings: expected a JSON object of settings");
  }
  TraceSettings s = base;
  TraceSettings defaults;
  for (const auto& [key, value] : changes.items()) {
    bool reset = value.is_null();
    std::string text;
    if (!reset) {
      FERRY_ASSIGN_OR_RETURN(text, OneString(key, value));
    }
    if (key == "trace_level") {
      if (!reset && text != "OFF" && text != "TIMESTAMPS") {
        return InvalidArgument(
            "trace settings: 'trace_level' must be OFF or TIMESTAMPS (ferry records no "
            "tensors)");
      }
      s.timestamps = reset ? defaults.timestamps : text == "TIMESTAMPS";
    } else if (key == "trace_rate") {
      FERRY_ASSIGN_OR_RETURN(int64_t rate, reset ? Result<int64_t>(defaults.rate)
                                                 : Integer(key, text, 1, TraceSettings::kMaxRate));
      s.rate = static_cast<uint32_t>(rate);
    } else if (key == "trace_count") {
      FERRY_ASSIGN_OR_RETURN(s.count, reset ? Result<int64_t>(defaults.count)
                                            : Integer(key, text, -1, TraceSettings::kMaxCount));
    } else if (key == "log_frequency" || key == "trace_file" || key == "trace_mode") {
      std::string_view want = key == "log_frequency" ? "0"
                              : key == "trace_file"  ? ""
                                                     : "opentelemetry";
      if (!reset && text != want) {
        return InvalidArgument("trace settings: '" + key + "' must be \"" + std::string(want) +
                               "\": ferryd exports spans to [trace] otlp_endpoint");
      }
    } else {
      return InvalidArgument("trace settings: '" + key.substr(0, 64) +
                             "' is not a trace setting (trace_level, trace_rate, trace_count, "
                             "log_frequency, trace_file, trace_mode)");
    }
  }
  return s;
}

TraceEndpoint::TraceEndpoint(shm::TraceStore* store)
    : store_(store), asked_sequence_(store == nullptr ? 0 : store->area().asked.load()) {}

std::pair<uint64_t, uint64_t> TraceEndpoint::WordAndBase() const {
  if (store_ == nullptr) {
    return {0, 0};
  }
  const shm::TraceAreaData& area = store_->area();
  if (area.asked_taken.load(std::memory_order_acquire) < asked_sequence_.load()) {
    return {own_word_.load(), own_base_.load()};  // Ours, until ferryd has taken it.
  }
  uint64_t base = area.sampled_base.load(std::memory_order_acquire);
  return {area.settings.load(std::memory_order_acquire), base};
}

TraceSettings TraceEndpoint::Current() const {
  TraceSettings s;
  TraceSettings::Decode(WordAndBase().first, &s);
  return s;
}

Result<TraceSettings> TraceEndpoint::Update(const nlohmann::json& changes) {
  if (store_ == nullptr) {
    return Unavailable(
        "tracing is off on this node: [trace] otlp_endpoint in the node file names the "
        "collector its spans go to");
  }
  std::lock_guard<std::mutex> lock(mu_);
  FERRY_ASSIGN_OR_RETURN(TraceSettings next, MergeTraceSettings(Current(), changes));
  shm::TraceAreaData& area = store_->area();
  // Requests sampled from here on count against the new trace_count, even those sampled
  // before ferryd takes the change; this host samples with it at once.
  uint64_t now = area.sampled.load(std::memory_order_relaxed);
  own_word_.store(next.Encode());
  own_base_.store(now);
  area.asked_word.store(next.Encode(), std::memory_order_relaxed);
  area.asked_sampled.store(now, std::memory_order_relaxed);
  area.asked.store(asked_sequence_.fetch_add(1) + 1, std::memory_order_release);
  return next;
}

bool TraceEndpoint::Sample() {
  auto [word, base] = WordAndBase();
  if ((word & 1) == 0) {
    return false;  // Off (or no settings): the common case.
  }
  TraceSettings s;
  if (!TraceSettings::Decode(word, &s)) {
    return false;
  }
  if (seen_.fetch_add(1, std::memory_order_relaxed) % s.rate != 0) {
    return false;
  }
  // What is left of trace_count, less what this host sampled since it was counted: exact for
  // this host's threads (compare-exchange), other hosts' at most a tick behind.
  std::atomic<uint64_t>& sampled = store_->area().sampled;
  uint64_t n = sampled.load(std::memory_order_relaxed);
  do {
    if (s.count >= 0 && n - std::min(n, base) >= static_cast<uint64_t>(s.count)) {
      return false;
    }
  } while (!sampled.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  return true;
}

void TraceEndpoint::Record(std::string_view traceparent, uint32_t model,
                           const hookhost::RequestTimings& t, uint32_t code) {
  if (store_ == nullptr) {
    return;
  }
  shm::TraceSpanData span{};
  if (traceparent.size() >= 55) {  // "00-<32 hex>-<16 hex>-<2 hex>", checked when parsed.
    span.trace_hi = Hex64(traceparent.substr(3, 16));
    span.trace_lo = Hex64(traceparent.substr(19, 16));
    span.parent_span = Hex64(traceparent.substr(36, 16));
  } else {
    span.trace_hi = Random64();
    span.trace_lo = Random64();
  }
  span.span = Random64();
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  span.start_unix_ns = now - t.total_ns;
  span.validate_ns = t.validate_ns;
  span.preprocess_ns = t.preprocess_ns;
  span.queue_ns = t.queue_ns;
  span.compute_ns = t.compute_ns;
  span.postprocess_ns = t.postprocess_ns;
  span.total_ns = t.total_ns;
  span.model = model;
  span.code = code;
  std::lock_guard<std::mutex> lock(mu_);
  store_->Push(span);
}

}  // namespace ferry::frontend
