// gait baseline --cache DIR [--test-from N]
//   Rank-1 of the GEI + Euclidean nearest-neighbour reference (gait/gei_baseline.hpp)
//   per probe set and probe view, on a preprocessed cache.
#include <fmt/format.h>

#include <optional>

#include "commands.hpp"
#include "common/check.hpp"
#include "common/validate.hpp"
#include "gait/gei_baseline.hpp"

namespace gait::cli {

void add_baseline_command(CLI::App& app) {
  auto* cache = new std::filesystem::path;
  auto* test_from = new std::optional<int>;  // empty: the protocol's split
  auto* cmd = app.add_subcommand("baseline", "Rank-1 of a GEI nearest-neighbour reference on a cache (no training)");
  cmd->add_option("--cache", *cache, "Cache folder from gait preprocess")
      ->required()
      ->check(common::validate::existing_folder());
  cmd->add_option("--test-from", *test_from, "First test subject (default: the 74:50 protocol split)")
      ->check(common::validate::range(1, 999, "subject id"));
  cmd->callback([=] {
    std::vector<std::string> problems;
    const auto entries = scan_cache(*cache, problems);
    XS_ASSERT(!entries.empty(), "{}: no cached sequences", cache->string());
    int max_subject = 0;
    for (const auto& e : entries) max_subject = std::max(max_subject, e.key.subject);
    Protocol p = protocol_for_subjects(max_subject);
    if (*test_from) {
      // Beyond the last subject there would be no test subject: a table of zeros.
      if (**test_from > max_subject)
        throw common::Error(fmt::format("--test-from {}: the cache's subjects end at {} ({} holds no test subject)",
                                        **test_from, subject_name(max_subject), cache->string()));
      p.train_last_subject = **test_from - 1;
    }
    const BaselineResult r = gei_rank1(entries, p);
    fmt::print("GEI + Euclidean NN, test subjects {}..{} ({}), identical views excluded\n", p.train_last_subject + 1,
               max_subject, r.test_subjects);
    fmt::print("probe |");
    for (const auto& [v, x] : r.per_view[0]) fmt::print(" {:>5}", view_name(v));
    fmt::print(" |  mean\n");
    const char* names[3] = {"NM", "BG", "CL"};
    for (int s = 0; s < 3; ++s) {
      fmt::print("{:>5} |", names[s]);
      for (const auto& [v, x] : r.per_view[s]) fmt::print(" {:5.1f}", 100 * x);
      fmt::print(" | {:5.1f}\n", 100 * r.rank1[s]);
    }
  });
}

}  // namespace gait::cli
