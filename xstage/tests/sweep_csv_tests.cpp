#include <gtest/gtest.h>

#include "common/check.hpp"
#include "xstage/sweep.hpp"

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
