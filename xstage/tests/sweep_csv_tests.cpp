#include <gtest/gtest.h>

#include "common/check.hpp"
#include "xstage/probe/sweep.hpp"

TEST(SweepCsv, RoundTrip) {
  std::vector<xstage::SweepRow> rows(2);
  rows[1].pattern = "all_peers";
  rows[1].store = "tma";
  rows[1].mode = "visible";
  rows[1].gap_ns = 10000;
  rows[1].bursts = 32;
  rows[0].bursts = 16;
  rows[0].issue_ns_med = 123.4;
  rows[1].issue_ns_med = 77.0;
  rows[0].issue_ns_mean = 130.5;
  rows[1].issue_ns_mean = 80.0;
  rows[1].period_ns_mean = 12000.5;
  rows[1].visible_ns_med = 2500.5;
  auto back = xstage::parse_sweep_csv(xstage::format_sweep_csv(rows), "mem");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].pattern, "all_peers");
  EXPECT_EQ(back[1].store, "tma");
  EXPECT_EQ(back[1].mode, "visible");
  EXPECT_DOUBLE_EQ(back[1].gap_ns, 10000);
  EXPECT_DOUBLE_EQ(back[0].issue_ns_med, 123.4);
  EXPECT_DOUBLE_EQ(back[1].visible_ns_med, 2500.5);
  EXPECT_DOUBLE_EQ(back[0].issue_ns_mean, 130.5);
  EXPECT_DOUBLE_EQ(back[1].period_ns_mean, 12000.5);
  EXPECT_EQ(back[1].warmup, rows[1].warmup);
}

TEST(SweepCsv, RejectsBadRows) {
  std::vector<xstage::SweepRow> rows(1);
  rows[0].bursts = 4;
  rows[0].issue_ns_med = 10;
  rows[0].issue_ns_mean = 11;
  std::string good = xstage::format_sweep_csv(rows);
  EXPECT_NO_THROW(xstage::parse_sweep_csv(good, "g"));
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.rfind(from), from.size(), to);
    return s;
  };
  EXPECT_THROW(xstage::parse_sweep_csv(replace("peer", "ring"), "b"), common::Error);
  EXPECT_THROW(xstage::parse_sweep_csv(replace("st16", "st32"), "b"), common::Error);
  EXPECT_THROW(xstage::parse_sweep_csv(replace(",132,", ",0,"), "b"), common::Error);
  EXPECT_THROW(xstage::parse_sweep_csv(replace(",16384,", ",-5,"), "b"), common::Error);
  EXPECT_THROW(xstage::parse_sweep_csv(replace(",16384,", ",abc,"), "b"), common::Error);
  EXPECT_THROW(xstage::parse_sweep_csv("gpus,pattern\n2,peer\n", "b"), common::Error);
  EXPECT_THROW(xstage::parse_sweep_csv(good.substr(0, good.find('\n') + 1), "b"), common::Error);
}

TEST(SweepCsv, OlderFilesWithoutOptionalColumnsStillRead) {
  const std::string old =
      "gpus,pattern,store,mode,sms,burst_bytes,gap_ns,bursts,issue_ns_med,issue_ns_p10,issue_ns_p90,"
      "period_ns_med,gbps,visible_ns_med,visible_ns_p10,visible_ns_p90,drain_ns_med\n"
      "2,peer,st16,issue,132,16384,0,48,3694.4,1152.7,7513.6,4476.9,317.30,-1,-1,-1,-1\n";
  auto rows = xstage::parse_sweep_csv(old, "old");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].issue_ns_mean, -1);
  EXPECT_EQ(rows[0].warmup, 8);
}
