// The probe's host plan for any GPU count (up to 8): destinations, the
// row -> destination map of an all-peer burst, the standard sweep.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "common/testing.hpp"
#include "xstage/probe/probe.hpp"

using namespace xstage::probe;
using common::error_of;

TEST(ProbePlan, DestinationsForEveryGpuCount) {
  for (int g = 1; g <= 8; ++g) {
    EXPECT_EQ(destinations("local", g), std::vector<int>{0});
    EXPECT_EQ(destinations("host", g), std::vector<int>{0});  // rank 0's mapped host memory
    if (g < 2) continue;
    EXPECT_EQ(destinations("peer", g), std::vector<int>{1});
    const auto all = destinations("all_peers", g);
    ASSERT_EQ(int(all.size()), g - 1);
    for (int i = 0; i < g - 1; ++i) EXPECT_EQ(all[i], i + 1);  // every rank but the sender, once
  }
  EXPECT_NE(error_of([] { destinations("peer", 1); }).find("at least 2 GPUs"), std::string::npos);
  EXPECT_NE(error_of([] { destinations("ring", 4); }).find("unknown pattern"), std::string::npos);
  EXPECT_NE(error_of([] { destinations("all_peers", kMaxDst + 2); }).find("at most"), std::string::npos);
  EXPECT_EQ(int(destinations("all_peers", kMaxDst + 1).size()), kMaxDst);
}

// On 8 GPUs an all-peer burst splits each SM's rows round-robin over 7 peers: every
// peer gets its share to within one row, and SMs start on different peers, so the
// first rows of a burst spread over all links.
TEST(ProbePlan, AllPeerRowsAreBalancedOnEightGpus) {
  const int n_dst = static_cast<int>(destinations("all_peers", 8).size());
  ASSERT_EQ(n_dst, 7);
  for (int rows : {1, 7, 8, 32, 100}) {
    for (int sm = 0; sm < 132; ++sm) {
      std::vector<int> count(n_dst, 0);
      for (int r = 0; r < rows; ++r) {
        const int d = probe_dst_of_row(r, sm, n_dst);
        ASSERT_GE(d, 0);
        ASSERT_LT(d, n_dst);
        ++count[d];
      }
      const auto [lo, hi] = std::minmax_element(count.begin(), count.end());
      EXPECT_LE(*hi - *lo, 1) << rows << " rows, SM " << sm;
    }
  }
  std::set<int> first;
  for (int sm = 0; sm < 132; ++sm) first.insert(probe_dst_of_row(0, sm, n_dst));
  EXPECT_EQ(int(first.size()), n_dst);
}

TEST(ProbePlan, StandardSweepScalesWithTheGpuCount) {
  for (bool quick : {true, false}) {
    std::map<int, std::map<std::string, int>> rows;  // gpus -> pattern -> rows
    for (int g : {1, 2, 4, 8}) {
      const auto s = standard_sweep(g, 132, quick);
      ASSERT_FALSE(s.empty());
      for (const auto& c : s) {
        ++rows[g][c.pattern];
        EXPECT_NO_THROW(destinations(c.pattern, g)) << c.pattern << " on " << g;
        EXPECT_GE(c.sms, 1);
        EXPECT_LE(c.sms, 132);
        EXPECT_GT(c.burst_bytes, 0u);
        EXPECT_EQ(c.burst_bytes % 16, 0u);
        EXPECT_GE(c.gap_ns, 0);
        EXPECT_TRUE(c.mode == "issue" || c.mode == "visible");
      }
    }
    EXPECT_EQ(rows[1].count("peer"), 0u);
    EXPECT_EQ(rows[2].count("all_peers"), 0u);
    // 4 and 8 GPUs: the same configurations (all_peers stores to 3 or 7 peers).
    EXPECT_EQ(rows[8], rows[4]);
    EXPECT_GT(rows[8]["all_peers"], 0);
    EXPECT_EQ(rows[8]["local"], rows[1]["local"]);
  }
}

// --pattern host: the host link gets the st16 sweep (with gaps long enough for its slow
// drain), every store kind and visible mode, on one GPU; the backpressure-ratio rows of
// the host-link results (132 SMs x 16 KiB at gap 0 and 50 us) are in it.
TEST(ProbePlan, HostSweepCoversEveryStoreKindOnOneGpu) {
  const auto s = standard_sweep(1, 132, false, {"host"});
  std::set<std::string> stores, modes;
  bool gap0 = false, gap50 = false;
  for (const auto& c : s) {
    EXPECT_EQ(c.pattern, "host");
    stores.insert(c.store);
    modes.insert(c.mode);
    if (c.store == "st16" && c.mode == "issue" && c.sms == 132 && c.burst_bytes == 16384) {
      gap0 = gap0 || c.gap_ns == 0;
      gap50 = gap50 || c.gap_ns == 50000;
    }
  }
  EXPECT_EQ(stores, (std::set<std::string>{"st4", "st8", "st16", "tma"}));
  EXPECT_EQ(modes, (std::set<std::string>{"issue", "visible"}));
  EXPECT_TRUE(gap0 && gap50);
  // Both links on two GPUs: peer and host each get the store kinds.
  std::map<std::string, std::set<std::string>> kinds;
  for (const auto& c : standard_sweep(2, 132, false, {"peer", "host"})) kinds[c.pattern].insert(c.store);
  EXPECT_EQ(kinds["peer"].size(), 4u);
  EXPECT_EQ(kinds["host"].size(), 4u);
  EXPECT_NE(error_of([] { standard_sweep(1, 132, false, {"host", "peer"}); }).find("at least 2 GPUs"),
            std::string::npos);
}

// The sender stores word 0's value plus the word index (its plan is made before the
// stamp), and the payload check compares with probe_word: the two agree only while
// probe_word is linear in the word. The check catches a stale burst only if the bursts
// of one SM start from different values, far enough apart that no burst's words
// (up to 1 MiB of them) overlap another's.
TEST(ProbePlan, PayloadWordIsLinearAndBurstsDoNotOverlap) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t e = rng(), sm = rng() % 1024, b = rng() % 65536, w = rng();
    EXPECT_EQ(probe_word(e, sm, b, w), static_cast<uint32_t>(probe_word(e, sm, b, 0) + w));
  }
  constexpr uint32_t kWords = (1u << 20) / 4;  // the largest burst's words
  for (uint32_t sm : {0u, 1u, 131u}) {
    std::vector<uint32_t> starts;
    for (uint32_t b = 0; b < 80; ++b) starts.push_back(probe_word(3, sm, b, 0));
    std::sort(starts.begin(), starts.end());
    for (std::size_t k = 1; k < starts.size(); ++k) EXPECT_GE(starts[k] - starts[k - 1], kWords) << "SM " << sm;
  }
}
