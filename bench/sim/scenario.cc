#include "bench/sim/scenario.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <set>

#include "config/node_config.h"
#include "config/scheduler_config_reader.h"
#include "config/toml_reader.h"
#include "worker/scheduler/fair_shares.h"

namespace ferry::sim {
namespace {

constexpr int64_t kMaxRows = 1 << 20;

void ReadCost(TableReader& r, CostSpec* cost) {
  if (auto table = r.Table("cost")) {
    table->Double("fixed_seconds", &cost->fixed_seconds, DoubleRange::NonNegative());
    table->Double("per_row_seconds", &cost->per_row_seconds, DoubleRange::NonNegative());
    table->Double("noise", &cost->noise, {0.0, 1.0, false, false});
    table->Double("drift_per_second", &cost->drift_per_second, {-1.0, 1.0, false, false});
    table->Double("warmup_factor", &cost->warmup_factor, {0.01, 100.0, false, false});
    if (auto sizes = table->Table("table")) {
      for (const auto& [key, node] : sizes->table()) {
        int64_t size = 0;
        std::string_view text = key.str();
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
        double seconds = 0;
        if (ec != std::errc() || end != text.data() + text.size() || size < 1) {
          sizes->ErrorAt(text, "table keys are batch sizes (positive integers)");
        } else if (sizes->Double(text, &seconds, DoubleRange::Positive())) {
          cost->table[size] = seconds;
        }
      }
    }
    table->Finish();
  }
  if (cost->table.empty() && cost->fixed_seconds + cost->per_row_seconds <= 0) {
    r.ErrorAt("cost", "a dispatch must cost more than 0 seconds");
  }
}

// A stream's tenant (by name, among the scenario's [[tenants]]) and priority level.
void ReadTenantAndLevel(TableReader& r, const std::vector<SimTenant>& tenants, ArrivalSpec* a) {
  std::string tenant;
  if (r.String("tenant", &tenant)) {
    auto it = std::find_if(tenants.begin(), tenants.end(),
                           [&](const SimTenant& t) { return t.name == tenant; });
    if (it == tenants.end()) {
      r.ErrorAt("tenant", "no [[tenants]] entry is named '" + tenant.substr(0, 64) + "'");
    } else {
      a->tenant = static_cast<uint32_t>(it - tenants.begin()) + 1;
    }
  }
  int64_t level = kDefaultPriority;
  if (r.Int("priority", &level, kHighestPriority, kLowestPriority)) {
    a->priority = static_cast<Priority>(level);
  }
}

// [[tenants]]: name and weight, numbered from 1 in file order (at most 63).
void ReadTenants(TableReader& r, Scenario* s) {
  for (TableReader& t : r.ArrayOfTables("tenants")) {
    SimTenant tenant;
    if (!t.String("name", &tenant.name) || tenant.name.empty()) {
      t.ErrorAt("name", "missing tenant name");
    }
    t.Double("weight", &tenant.weight, {0, 1e12, true, false});
    t.Finish();
    s->tenants.push_back(tenant);
    s->scheduler.tenant_weights[static_cast<uint32_t>(s->tenants.size())] = tenant.weight;
  }
  if (s->tenants.size() >= kMaxSchedulerTenants) {
    r.ErrorAt("tenants", "at most " + std::to_string(kMaxSchedulerTenants - 1) + " tenants");
  }
}

void ReadArrival(TableReader& r, const std::string& base_dir, ArrivalSpec* a) {
  std::string kind;
  if (!r.String("kind", &kind)) {
    r.ErrorAt("kind", "missing: saturate, poisson, burst, trace or closed");
  }
  r.String("name", &a->name);
  int64_t variant = 0;
  if (r.Int("variant", &variant, 0, 1023)) {
    a->variant = static_cast<int>(variant);
  }
  r.Int("clients", &a->clients, 1, 1 << 20);
  r.Double("think_seconds", &a->think_seconds, DoubleRange::NonNegative());
  static const std::map<std::string, ArrivalSpec::Kind> kKinds = {
      {"saturate", ArrivalSpec::Kind::kSaturate},
      {"poisson", ArrivalSpec::Kind::kPoisson},
      {"burst", ArrivalSpec::Kind::kBurst},
      {"trace", ArrivalSpec::Kind::kTrace},
      {"closed", ArrivalSpec::Kind::kClosed}};
  if (!kind.empty()) {
    auto it = kKinds.find(kind);
    if (it == kKinds.end()) {
      r.ErrorAt("kind",
                "unknown arrival kind '" + kind + "' (saturate, poisson, burst, trace, closed)");
    } else {
      a->kind = it->second;
    }
  }
  bool has_rate = r.Double("rate", &a->rate, DoubleRange::Positive());
  r.Int("backlog", &a->backlog, 1, 1 << 20);
  bool has_count = r.Int("count", &a->count, 1, 100'000'000);
  r.Double("at_seconds", &a->at_seconds, DoubleRange::NonNegative());
  r.Double("start_seconds", &a->start_seconds, DoubleRange::NonNegative());
  r.Double("stop_seconds", &a->stop_seconds, DoubleRange::Positive());
  const toml::node* rows = r.Raw("rows");
  if (rows != nullptr && rows->is_integer()) {
    int64_t n = 1;
    if (r.Int("rows", &n, 1, kMaxRows)) {
      a->rows_min = a->rows_max = n;
    }
  } else if (rows != nullptr) {
    std::vector<int64_t> range;
    if (r.IntArray("rows", &range, 1, kMaxRows) && range.size() == 2 && range[0] <= range[1]) {
      a->rows_min = range[0];
      a->rows_max = range[1];
    } else {
      r.ErrorAt("rows", "expected an integer or [min, max] with min <= max");
    }
  }
  double deadline = 0;
  if (r.Double("deadline_seconds", &deadline, DoubleRange::Positive())) {
    a->deadline_seconds = deadline;
  }
  std::string trace;
  bool has_trace = r.String("trace", &trace);
  if (a->kind == ArrivalSpec::Kind::kPoisson && !has_rate) {
    r.ErrorAt("rate", "poisson arrivals need rate (requests per second)");
  }
  if (a->kind == ArrivalSpec::Kind::kBurst && !has_count) {
    r.ErrorAt("count", "burst arrivals need count");
  }
  if (a->kind == ArrivalSpec::Kind::kTrace) {
    if (!has_trace) {
      r.ErrorAt("trace", "trace arrivals need trace = \"FILE.csv\"");
    } else {
      std::string path = std::filesystem::path(trace).is_absolute()
                             ? trace
                             : (std::filesystem::path(base_dir) / trace).string();
      Result<std::string> text = ReadTextFile(path, 256 << 20);
      Result<std::vector<TraceEvent>> events =
          text.ok() ? ParseTrace(*text, path) : Result<std::vector<TraceEvent>>(text.error());
      if (events.ok()) {
        a->trace = std::move(*events);
      } else {
        r.ErrorAt("trace", events.error().message);
      }
    }
  }
  r.Finish();
}

}  // namespace

double CostSpec::Mean(int64_t batch_size) const {
  auto it = table.find(batch_size);
  if (it != table.end()) {
    return it->second;
  }
  return fixed_seconds + per_row_seconds * static_cast<double>(batch_size);
}

Result<std::vector<TraceEvent>> ParseTrace(std::string_view text, const std::string& source) {
  std::vector<TraceEvent> events;
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string_view line = text.substr(start, end == std::string_view::npos ? end : end - start);
    start = end == std::string_view::npos ? text.size() : end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    if (line.empty() || line[0] == '#' || (line_number == 1 && line.rfind("time", 0) == 0)) {
      continue;
    }
    std::vector<double> fields;
    size_t at = 0;
    while (at <= line.size()) {
      size_t comma = line.find(',', at);
      std::string field(line.substr(at, comma == std::string_view::npos ? comma : comma - at));
      char* parsed_end = nullptr;
      double value = std::strtod(field.c_str(), &parsed_end);
      if (field.empty() || parsed_end != field.c_str() + field.size() || !std::isfinite(value)) {
        return InvalidArgument(source + ":" + std::to_string(line_number) + ": '" + field +
                               "' is not a number");
      }
      fields.push_back(value);
      if (comma == std::string_view::npos) {
        break;
      }
      at = comma + 1;
    }
    if (fields.size() < 2 || fields.size() > 3 || fields[0] < 0 || fields[1] < 1 ||
        fields[1] > kMaxRows || fields[1] != std::floor(fields[1]) ||
        (fields.size() == 3 && fields[2] <= 0)) {
      return InvalidArgument(source + ":" + std::to_string(line_number) +
                             ": expected time_seconds >= 0, rows >= 1 (integer), and optionally "
                             "deadline_seconds > 0");
    }
    TraceEvent event{fields[0], static_cast<int64_t>(fields[1]), std::nullopt};
    if (fields.size() == 3) {
      event.deadline_seconds = fields[2];
    }
    if (!events.empty() && event.time_seconds < events.back().time_seconds) {
      return InvalidArgument(source + ":" + std::to_string(line_number) +
                             ": times must not decrease");
    }
    events.push_back(event);
  }
  return events;
}

// A byte size as an integer or a string with a unit ("64MiB"); false when absent or invalid
// (the latter recorded).
static bool ReadBytes(TableReader& r, std::string_view key, uint64_t* out) {
  const toml::node* node = r.Raw(key);
  if (node == nullptr) {
    return false;
  }
  if (auto n = node->value<int64_t>(); n && *n > 0) {
    *out = static_cast<uint64_t>(*n);
    return true;
  }
  if (auto text = node->value<std::string>()) {
    if (Result<uint64_t> bytes = ParseByteSize(*text); bytes.ok() && *bytes > 0) {
      *out = *bytes;
      return true;
    }
  }
  r.ErrorAt(key, "expected a positive number of bytes (an integer, or a string such as \"64MiB\")");
  return false;
}

static void ReadWeights(TableReader& m, SimModel* model, ModelSchedulingConfig* policy) {
  ReadBytes(m, "weight_bytes", &model->weight_bytes);
  m.Enum<Residency>("residency", &policy->residency,
                    {{"pinned", Residency::kPinned},
                     {"warm", Residency::kWarm},
                     {"on_demand", Residency::kOnDemand}});
}

// weight_budget, load_gb_per_s and eviction; with a budget every model needs its bytes, none
// larger than the budget, the pinned ones together within it.
static void ReadBudget(TableReader& r, Scenario* s) {
  ReadBytes(r, "weight_budget", &s->weight_budget);
  r.Double("load_gb_per_s", &s->load_gb_per_s, {0.0, 1e6, true, false});
  std::string eviction = "lru";
  if (r.String("eviction", &eviction) && eviction != "lru" && eviction != "all") {
    r.ErrorAt("eviction", "expected \"lru\" or \"all\"");
  }
  s->evict_all = eviction == "all";
  if (s->weight_budget == 0) {
    return;
  }
  uint64_t pinned = 0;
  for (const SimModel& m : s->models) {
    if (m.weight_bytes == 0 || m.weight_bytes > s->weight_budget) {
      r.ErrorAt("weight_budget", "model '" + m.name + "' needs weight_bytes in (0, weight_budget]");
    }
    if (s->scheduler.ForModel(m.name).residency == Residency::kPinned) {
      pinned += m.weight_bytes;
    }
  }
  if (pinned > s->weight_budget) {
    r.ErrorAt("weight_budget", "the pinned models' weights do not fit in it");
  }
}

Result<Scenario> ParseScenario(std::string_view text, const std::string& source,
                               const std::string& base_dir) {
  Diagnostics diagnostics;
  std::optional<toml::table> root = ParseToml(text, source, &diagnostics);
  if (!root) {
    return diagnostics.ToError();
  }
  Scenario s;
  TableReader r(*root, "", source, &diagnostics);
  r.String("name", &s.name);
  r.String("description", &s.description);
  r.Double("duration_seconds", &s.duration_seconds, {0.0, 1e6, true, false});
  r.Double("warmup_seconds", &s.warmup_seconds, DoubleRange::NonNegative());
  int64_t seed = 1;
  if (r.Int("seed", &seed, 0, std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(seed);
  }
  r.Bool("baselines", &s.baselines);
  if (s.warmup_seconds >= s.duration_seconds) {
    r.ErrorAt("warmup_seconds", "must be less than duration_seconds");
  }
  if (auto scheduler = r.Table("scheduler")) {
    ReadSchedulerTable(*scheduler, &s.scheduler);
  }
  ReadTenants(r, &s);
  std::set<std::string> names;
  for (TableReader& m : r.ArrayOfTables("models")) {
    SimModel model;
    if (!m.String("name", &model.name) || model.name.empty()) {
      m.ErrorAt("name", "missing model name");
    } else if (!names.insert(model.name).second) {
      m.ErrorAt("name", "model '" + model.name + "' appears twice");
    }
    m.Double("weight", &model.weight, DoubleRange::Positive());
    int64_t variants = 1;
    if (m.Int("variants", &variants, 1, 1024)) {
      model.variants = static_cast<int>(variants);
    }
    if (m.IntArray("sizes", &model.sizes, 0, kMaxRows) && model.sizes != std::vector<int64_t>{0}) {
      for (size_t i = 1; i < model.sizes.size(); ++i) {
        if (model.sizes[i] <= model.sizes[i - 1]) {
          m.ErrorAt("sizes", "compiled sizes must be strictly ascending");
          break;
        }
      }
      if (model.sizes.empty() || model.sizes[0] < 1) {
        m.ErrorAt("sizes", "at least one compiled size, each >= 1 (or [0]: unbatched)");
      }
    }
    int64_t cap = 0;
    if (m.Int("max_batch_size", &cap, 1, kMaxRows)) {
      model.max_batch_size = cap;
    }
    ReadCost(m, &model.cost);
    ReadWeights(m, &model, &s.scheduler.models[model.name]);
    for (TableReader& a : m.ArrayOfTables("arrivals")) {
      ArrivalSpec arrival;
      ReadTenantAndLevel(a, s.tenants, &arrival);
      ReadArrival(a, base_dir, &arrival);
      if (arrival.variant >= model.variants) {
        a.ErrorAt("variant", "the model has " + std::to_string(model.variants) + " variants");
      }
      if (arrival.name.empty()) {
        arrival.name = model.name + "/" + std::to_string(model.arrivals.size());
      }
      model.arrivals.push_back(std::move(arrival));
    }
    m.Finish();
    s.scheduler.models[model.name].weight = model.weight;
    s.scheduler.models[model.name].max_batch_size = model.max_batch_size;
    s.models.push_back(std::move(model));
  }
  if (s.models.empty()) {
    r.ErrorAt("models", "at least one [[models]] is required");
  }
  r.Double("share_window_seconds", &s.share_window_seconds, {0.001, 1e6, false, false});
  ReadBudget(r, &s);
  for (TableReader& e : r.ArrayOfTables("events")) {
    ControlEvent event;
    e.Double("at_seconds", &event.at_seconds, DoubleRange::NonNegative());
    e.Enum<ControlEvent::Kind>("kind", &event.kind,
                               {{"set_policy", ControlEvent::Kind::kSetPolicy},
                                {"discipline", ControlEvent::Kind::kDiscipline}});
    if (event.kind == ControlEvent::Kind::kSetPolicy) {
      if (!e.String("model", &event.model) || names.count(event.model) == 0) {
        e.ErrorAt("model", "set_policy needs the name of a model of this scenario");
      }
      e.Double("weight", &event.weight, DoubleRange::Positive());
    } else {
      e.Enum<Discipline>(
          "discipline", &event.discipline,
          {{"fair", Discipline::kFair}, {"fifo", Discipline::kFifo}, {"edf", Discipline::kEdf}});
    }
    e.Finish();
    if (!s.events.empty() && event.at_seconds < s.events.back().at_seconds) {
      e.ErrorAt("at_seconds", "events must be in time order");
    }
    s.events.push_back(std::move(event));
  }
  for (TableReader& a : r.ArrayOfTables("alternatives")) {
    Alternative alternative{"", s.scheduler};
    if (!a.String("label", &alternative.label)) {
      a.ErrorAt("label", "missing label");
    }
    ReadSchedulerKeys(a, &alternative.scheduler);
    if (uint64_t budget = 0; ReadBytes(a, "weight_budget", &budget)) {
      alternative.weight_budget = budget;
    }
    if (std::string eviction; a.String("eviction", &eviction)) {
      if (eviction != "lru" && eviction != "all") {
        a.ErrorAt("eviction", "expected \"lru\" or \"all\"");
      }
      alternative.evict_all = eviction == "all";
    }
    a.Finish();
    s.alternatives.push_back(std::move(alternative));
  }
  r.Finish();
  if (!diagnostics.empty()) {
    return diagnostics.ToError();
  }
  return s;
}

Result<Scenario> LoadScenario(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  std::string base = std::filesystem::path(path).parent_path().string();
  return ParseScenario(text, path, base.empty() ? "." : base);
}

}  // namespace ferry::sim
