// params.json: the fitted Burst-Gap parameters, read strictly.
//
// {
//   "version": 1, "source_csv": "...", "holdout_fraction": 0.3, "seed": 42,
//   "target": "issue_ns_mean",
//   "groups": [ { "pattern": "peer", "store": "st16", "gpus": 2,
//                 "t0_ns_per_byte": 0.02, "issue_latency_ns": 40, "issue_floor_ns": null,
//                 "issue_buffer_bytes": null, "backlog_limit_bytes": null,
//                 "loop_overhead_ns": 400,
//                 "drain_GBps": 350, "drain_per_sm_GBps": null,
//                 "capacity_bytes_gpu": 4194304, "capacity_bytes_per_sm": null,
//                 "capacity_scope": "gpu", "drain_bound": "fit", "capacity_bound": "fit",
//                 "sms_max": 132, "n_rows": 310, "fit_rel_error_median": 0.02 } ] }
//
// Every key is required (null only where the value is optional) but issue_floor_ns,
// issue_buffer_bytes and backlog_limit_bytes, which files fitted before them lack;
// unknown keys are errors, so a typo never silently falls back to a default.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <set>

#include "common/check.hpp"
#include "common/files.hpp"
#include "common/validate.hpp"
#include "xstage/burstgap/burstgap.hpp"

namespace xstage::burstgap {

using nlohmann::json;

namespace {

// A params file is user input: its errors are one line naming the file and the field,
// without the source location XS_ASSERT adds for programming errors.
template <class... A>
[[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
  throw common::Error(fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void need(bool ok, fmt::format_string<A...> f, A&&... a) {
  if (!ok) fail(f, std::forward<A>(a)...);
}

}  // namespace

const char* to_string(CapacityScope s) {
  switch (s) {
    case CapacityScope::gpu: return "gpu";
    case CapacityScope::sm: return "sm";
    case CapacityScope::both: return "both";
  }
  return "?";
}

const char* to_string(Bound b) { return b == Bound::fit ? "fit" : "lower_bound"; }
const char* to_string(FitTarget t) { return t == FitTarget::mean ? "issue_ns_mean" : "issue_ns_med"; }

const ModelParams& Params::find(const std::string& pattern, const std::string& store, int gpus) const {
  const ModelParams* hit = nullptr;
  int matches = 0;
  std::string have;
  for (const auto& g : groups) {
    have += fmt::format("{}{}/{}/{}gpu", have.empty() ? "" : ", ", g.pattern, g.store, g.gpus);
    if (g.pattern == pattern && g.store == store && (gpus == 0 || g.gpus == gpus)) {
      hit = &g;
      ++matches;
    }
  }
  if (matches == 1) return *hit;
  if (matches > 1)
    fail("params ({}): {}/{} was fitted for several GPU counts; choose one with --gpus (have {})", source_csv,
            pattern, store, have);
  fail("params ({}): no fitted group for pattern '{}', store '{}'{} (have {})", source_csv, pattern, store,
          gpus ? fmt::format(", {} GPUs", gpus) : "", have.empty() ? "none" : have);
}

const ModelParams& Params::for_exchange(int ranks) const {
  need(ranks >= 1, "params: an exchange among {} ranks", ranks);
  // The fitted group of (pattern, st16) on the most GPUs <= ranks (fewest_if_none: else on the fewest).
  auto pick = [&](const std::string& pattern, bool fewest_if_none) -> const ModelParams* {
    const ModelParams *below = nullptr, *fewest = nullptr;
    for (const auto& g : groups) {
      if (g.pattern != pattern || g.store != "st16") continue;
      if (g.gpus <= ranks && (!below || g.gpus > below->gpus)) below = &g;
      if (!fewest || g.gpus < fewest->gpus) fewest = &g;
    }
    return below ? below : fewest_if_none ? fewest : nullptr;
  };
  if (ranks >= 3)
    if (const ModelParams* g = pick("all_peers", false)) return *g;
  if (const ModelParams* g = pick("peer", true)) return *g;
  return find("peer", "st16");  // throws, listing what there is
}

namespace {

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json group_to_json(const ModelParams& g) {
  json j;
  j["pattern"] = g.pattern;
  j["store"] = g.store;
  j["gpus"] = g.gpus;
  j["t0_ns_per_byte"] = g.t0_ns_per_byte;
  j["issue_latency_ns"] = g.issue_latency_ns;
  j["issue_floor_ns"] = opt(g.issue_floor_ns);
  j["issue_buffer_bytes"] = opt(g.issue_buffer_bytes);
  j["backlog_limit_bytes"] = opt(g.backlog_limit_bytes);
  j["loop_overhead_ns"] = g.loop_overhead_ns;
  j["drain_GBps"] = g.drain_GBps;
  j["drain_per_sm_GBps"] = opt(g.drain_per_sm_GBps);
  j["capacity_bytes_gpu"] = opt(g.capacity_bytes_gpu);
  j["capacity_bytes_per_sm"] = opt(g.capacity_bytes_per_sm);
  j["capacity_scope"] = to_string(g.capacity_scope);
  j["drain_bound"] = to_string(g.drain_bound);
  j["capacity_bound"] = to_string(g.capacity_bound);
  j["sms_max"] = g.sms_max;
  j["n_rows"] = g.n_rows;
  j["fit_rel_error_median"] = g.fit_rel_error_median;
  return j;
}

// The range of every model value: a fit works on log parameters clamped to +-60
// (fit.cpp), so it never writes a value outside exp(+-60) ~ 1e-26 .. 1e26. A file
// beyond these was not written by a fit (t0 = 1e308 would predict "inf ms" and advise a
// gap of "nan ns"), so it is refused when read.
constexpr double kSmallest = 1e-27;
constexpr double kLargest = 1e27;

// Field access that names the file and the field on any problem.
class Reader {
 public:
  Reader(const json& obj, std::string where, const std::string& source) : obj_(obj), where_(std::move(where)), source_(source) {
    need(obj_.is_object(), "{}: {} must be a JSON object", source_, where_);
  }
  const json& field(const char* name) {
    seen_.insert(name);
    auto it = obj_.find(name);
    need(it != obj_.end(), "{}: {}: missing field '{}'", source_, where_, name);
    return *it;
  }
  // A finite number in [kSmallest (positive) or 0, kLargest], in `unit`.
  double number(const char* name, bool positive, std::string_view unit) {
    const json& v = field(name);
    need(v.is_number(), "{}: {}: field '{}' must be a number", source_, where_, name);
    const double d = v.get<double>();
    common::validate::in_range(d, positive ? kSmallest : 0.0, kLargest, fmt::format("{}: {}: field '{}'", source_, where_, name),
                               unit);
    return d;
  }
  std::optional<double> optional_number(const char* name, std::string_view unit, bool positive = true) {
    if (field(name).is_null()) return std::nullopt;
    return number(name, positive, unit);
  }
  int integer(const char* name, int min) {
    const json& v = field(name);
    need(v.is_number_integer(), "{}: {}: field '{}' must be an integer", source_, where_, name);
    const auto i = v.get<long long>();
    need(i >= min && i <= 1'000'000'000, "{}: {}: field '{}' must be >= {} (got {})", source_, where_, name, min, i);
    return static_cast<int>(i);
  }
  std::string text(const char* name) {
    const json& v = field(name);
    need(v.is_string(), "{}: {}: field '{}' must be a string", source_, where_, name);
    return v.get<std::string>();
  }
  void no_unknown_keys() {
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      need(seen_.count(it.key()), "{}: {}: unknown field '{}'", source_, where_, it.key());
  }

 private:
  const json& obj_;
  std::string where_;
  const std::string& source_;
  std::set<std::string> seen_;
};

Bound parse_bound(const std::string& s, const std::string& where) {
  if (s == "fit") return Bound::fit;
  if (s == "lower_bound") return Bound::lower;
  fail("{}: bound '{}' is not 'fit' or 'lower_bound'", where, s);
}

ModelParams group_from_json(const json& j, std::size_t index, const std::string& source) {
  ModelParams g;
  Reader r(j, fmt::format("groups[{}]", index), source);
  g.pattern = r.text("pattern");
  g.store = r.text("store");
  const std::string where = fmt::format("{}: groups[{}] ({}/{})", source, index, g.pattern, g.store);
  need(is_valid_pattern(g.pattern), "{}: unknown pattern '{}'", where, g.pattern);
  need(is_valid_store(g.store), "{}: unknown store '{}'", where, g.store);
  g.gpus = r.integer("gpus", 1);
  g.t0_ns_per_byte = r.number("t0_ns_per_byte", true, "ns/B");
  g.issue_latency_ns = r.number("issue_latency_ns", false, "ns");
  // Files fitted before the issue floor existed lack the key: no floor.
  if (j.contains("issue_floor_ns")) g.issue_floor_ns = r.optional_number("issue_floor_ns", "ns");
  // Likewise the issue buffer: none.
  if (j.contains("issue_buffer_bytes")) g.issue_buffer_bytes = r.optional_number("issue_buffer_bytes", "B");
  // The backlog limit may be 0 (no backlog carries over a gap).
  if (j.contains("backlog_limit_bytes")) g.backlog_limit_bytes = r.optional_number("backlog_limit_bytes", "B", false);
  g.loop_overhead_ns = r.number("loop_overhead_ns", false, "ns");
  g.drain_GBps = r.number("drain_GBps", true, "GB/s");
  g.drain_per_sm_GBps = r.optional_number("drain_per_sm_GBps", "GB/s");
  g.capacity_bytes_gpu = r.optional_number("capacity_bytes_gpu", "B");
  g.capacity_bytes_per_sm = r.optional_number("capacity_bytes_per_sm", "B");
  const std::string scope = r.text("capacity_scope");
  if (scope == "gpu") g.capacity_scope = CapacityScope::gpu;
  else if (scope == "sm") g.capacity_scope = CapacityScope::sm;
  else if (scope == "both") g.capacity_scope = CapacityScope::both;
  else fail("{}: capacity_scope '{}' is not gpu, sm or both", where, scope);
  const bool need_gpu = g.capacity_scope != CapacityScope::sm, need_sm = g.capacity_scope != CapacityScope::gpu;
  need(need_gpu == g.capacity_bytes_gpu.has_value(), "{}: capacity_bytes_gpu must be {} for scope '{}'", where,
            need_gpu ? "a number" : "null", scope);
  need(need_sm == g.capacity_bytes_per_sm.has_value(), "{}: capacity_bytes_per_sm must be {} for scope '{}'",
            where, need_sm ? "a number" : "null", scope);
  g.drain_bound = parse_bound(r.text("drain_bound"), where);
  g.capacity_bound = parse_bound(r.text("capacity_bound"), where);
  g.sms_max = r.integer("sms_max", 1);
  g.n_rows = r.integer("n_rows", 0);
  g.fit_rel_error_median = r.number("fit_rel_error_median", false, "");
  r.no_unknown_keys();
  return g;
}

}  // namespace

std::string params_to_json(const Params& p) {
  json j;
  j["version"] = p.version;
  j["source_csv"] = p.source_csv;
  j["holdout_fraction"] = p.holdout_fraction;
  j["seed"] = p.seed;
  j["target"] = to_string(p.target);
  j["groups"] = json::array();
  for (const auto& g : p.groups) j["groups"].push_back(group_to_json(g));
  return j.dump(2) + "\n";
}

Params params_from_json(const std::string& text, const std::string& source_name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON (byte {})", source_name, e.byte);
  } catch (const json::exception& e) {  // a number beyond the double range (1e999)
    fail("{}: not valid JSON ({})", source_name, e.what());
  }
  Params p;
  Reader r(j, "top level", source_name);
  p.version = r.integer("version", 1);
  need(p.version == 1, "{}: params version {} is not supported (this build reads version 1)", source_name,
            p.version);
  p.source_csv = r.text("source_csv");
  p.holdout_fraction = r.number("holdout_fraction", false, "");
  need(p.holdout_fraction < 1, "{}: holdout_fraction must be < 1", source_name);
  const json& seed = r.field("seed");
  need(seed.is_number_unsigned() || (seed.is_number_integer() && seed.get<long long>() >= 0),
            "{}: top level: field 'seed' must be a non-negative integer", source_name);
  p.seed = seed.get<std::uint64_t>();
  const std::string target = r.text("target");
  if (target == "issue_ns_mean") p.target = FitTarget::mean;
  else if (target == "issue_ns_med") p.target = FitTarget::median;
  else fail("{}: target '{}' is not issue_ns_mean or issue_ns_med", source_name, target);
  const json& groups = r.field("groups");
  need(groups.is_array() && !groups.empty(), "{}: field 'groups' must be a non-empty array", source_name);
  r.no_unknown_keys();
  for (std::size_t i = 0; i < groups.size(); ++i) p.groups.push_back(group_from_json(groups[i], i, source_name));
  return p;
}

std::filesystem::path params_path_or_default(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  const fs::path shipped = "xstage/data/h200_params.json";
  if (const char* src = std::getenv("XSTAGE_SOURCE_DIR")) return fs::path(src) / shipped;
  std::error_code ec;
  if (fs::exists(shipped, ec)) return shipped;  // run from the repository root
#ifdef XSTAGE_SOURCE_DIR_DEFAULT
  const fs::path built = fs::path(XSTAGE_SOURCE_DIR_DEFAULT) / shipped;
  if (fs::exists(built, ec)) return built;
  const std::string also = fmt::format(" nor under {}, the source tree of this build", XSTAGE_SOURCE_DIR_DEFAULT);
#else
  const std::string also;
#endif
  throw common::Error(fmt::format("no Burst-Gap parameters: {} is not under the working directory{} (give --params, or "
                                  "set XSTAGE_SOURCE_DIR to the repository)",
                                  shipped.string(), also));
}

Params read_params(const std::filesystem::path& path) {
  return params_from_json(common::read_file(path), path.string());
}

Params read_params_or_default(const std::string& given) {
  namespace fs = std::filesystem;
  const fs::path first = params_path_or_default(given);
  Params p = read_params(first);
  if (!given.empty()) return p;
  for (const char* other : {"h200x4_params.json", "h200_host_params.json"}) {  // the other shipped fits (xstage/data/README.md)
    const fs::path more = first.parent_path() / other;
    std::error_code ec;
    if (!fs::exists(more, ec)) continue;
    for (ModelParams& g : read_params(more).groups) p.groups.push_back(std::move(g));
  }
  return p;
}

void write_params(const Params& p, const std::filesystem::path& path) {
  common::write_file_atomic(path, params_to_json(p));
}

}  // namespace xstage::burstgap
