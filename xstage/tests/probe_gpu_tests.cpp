// GPU tests of the probe: small sweeps run, verify their payload bitwise, give
// sane numbers; bad input is refused before any GPU work.
#include <gtest/gtest.h>

#include "common/check.hpp"
#include "xstage/comm/comm.hpp"
#include "xstage/probe/probe.hpp"

namespace {

xstage::probe::ProbeOptions small(int gpus) {
  xstage::probe::ProbeOptions o;
  o.gpus = gpus;
  o.warmup = 2;
  o.bursts = 8;
  o.buffer_bytes = 16 << 20;
  o.progress = false;
  return o;
}

}  // namespace

TEST(ProbeGpu, EveryStoreKindAndPatternRunsAndVerifies) {
  const int n = xstage::comm::visible_gpus();
  ASSERT_GE(n, 1);
  auto o = small(std::min(n, 4));
  for (const char* st : {"st4", "st8", "st16", "tma"}) {
    o.configs.push_back({"local", st, "issue", 8, 4096 + 16, 0});
    o.configs.push_back({"host", st, "issue", 16, 16384, 1000});  // over the host link, any GPU count
    o.configs.push_back({"host", st, "visible", 8, 8192, 2000});
    if (n >= 2) {
      o.configs.push_back({"peer", st, "issue", 16, 16384, 1000});
      o.configs.push_back({"peer", st, "visible", 16, 8192, 2000});
    }
    if (n >= 3) o.configs.push_back({"all_peers", st, "visible", 32, 65536, 0});
  }
  const auto res = xstage::probe::run_probe(o);
  ASSERT_EQ(res.rows.size(), o.configs.size());
  EXPECT_GT(res.verified_words, 0);
  for (const auto& r : res.rows) {
    EXPECT_GT(r.issue_ns_med, 0) << r.pattern << " " << r.store;
    EXPECT_LE(r.issue_ns_p10, r.issue_ns_med);
    EXPECT_GE(r.issue_ns_p90, r.issue_ns_med);
    EXPECT_GT(r.gbps, 0);
    if (r.mode == "visible") {
      EXPECT_GT(r.drain_ns_med, 0);
      if (r.pattern != "host") EXPECT_GT(r.visible_ns_med, 0);  // no GPU observes host memory
    }
  }
  EXPECT_GT(res.copy_engine_d2h_GBps, 1.0);
  if (n >= 2) {
    EXPECT_GT(res.copy_engine_GBps, 10.0);
    EXPECT_GT(res.ping_rtt_ns[1], 0.0);
  }
}

// Fresh addresses (the default): every burst to the next place of the SM's region; the
// last burst's place holds its pattern (verified bitwise inside run_probe) on the host
// link and locally. Same addresses: every burst rewrites the region's start.
TEST(ProbeGpu, FreshAndSameAddressesVerify) {
  for (bool fresh : {true, false}) {
    auto o = small(1);
    EXPECT_TRUE(o.fresh_addresses);
    o.fresh_addresses = fresh;
    o.buffer_bytes = std::size_t{8} << 20;
    o.bursts = 40;  // 42 bursts in all
    for (const char* st : {"st16", "tma"}) {
      o.configs.push_back({"host", st, "issue", 16, 16384, 0});  // 32 places per SM: the rotation wraps
      o.configs.push_back({"local", st, "issue", 8, 4096 + 16, 1000});
    }
    const auto res = xstage::probe::run_probe(o);
    EXPECT_EQ(res.fresh_addresses, fresh);
    EXPECT_GT(res.verified_words, 0);
    for (const auto& r : res.rows) EXPECT_GT(r.issue_ns_med, 0) << r.pattern << " " << r.store;
  }
}

TEST(ProbeGpu, BadInputIsRefused) {
  const int n = xstage::comm::visible_gpus();
  auto o = small(n + 1);
  o.configs.push_back({"local", "st16", "issue", 1, 4096, 0});
  EXPECT_THROW(xstage::probe::run_probe(o), common::Error);  // more GPUs than present
  o = small(1);
  o.configs.push_back({"local", "st16", "issue", 1, 4100, 0});
  EXPECT_THROW(xstage::probe::run_probe(o), common::Error);  // not a multiple of 16
  o.configs = {{"local", "st16", "issue", 132, 1 << 20, 0}};
  o.buffer_bytes = 1 << 20;
  EXPECT_THROW(xstage::probe::run_probe(o), common::Error);  // burst x SMs larger than the buffer
  o = small(1);
  o.configs = {{"local", "st16", "issue", 100000, 4096, 0}};
  EXPECT_THROW(xstage::probe::run_probe(o), common::Error);  // more SMs than the GPU has
  o.configs = {{"peer", "st16", "issue", 8, 4096, 0}};
  EXPECT_THROW(xstage::probe::run_probe(o), common::Error);  // peer pattern on one GPU
}
