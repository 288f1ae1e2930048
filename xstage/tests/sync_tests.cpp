// The host side of the device-sync library on the CPU: a wait report in one line
// (kernel, rank, block, thread, site by name with its index, expected, seen).
#include <gtest/gtest.h>

#include <iterator>
#include <string>

#include "xstage/sync/report.hpp"

namespace {

namespace sync = xstage::sync;  // in a namespace: at global scope it would clash with ::sync()

constexpr const char* kNames[] = {"mbarrier full (stage {index})", "ready flag of owner rank {index}", "combine rows"};
constexpr sync::SiteNames kSites{sync::Kernel::test, "test kernel", kNames, static_cast<int>(std::size(kNames))};

sync::WaitReport report(int site, int rank, int index, uint32_t expected, uint32_t seen) {
  return {1, static_cast<int>(sync::Kernel::test), site, rank, 3, 128, index, expected, seen};
}

TEST(SyncReport, DescribeNamesEveryField) {
  EXPECT_EQ(sync::describe(report(1, 2, 5, 7, 6), &kSites),
            "test kernel: device wait timed out on rank 2 block 3 thread 128: ready flag of owner rank 5 "
            "(index 5, expected 7, saw 6)");
}

TEST(SyncReport, NoRankAndNoIndexAreLeftOut) {
  EXPECT_EQ(sync::describe(report(2, -1, -1, 4, 0), &kSites),
            "test kernel: device wait timed out block 3 thread 128: combine rows (expected 4, saw 0)");
}

TEST(SyncReport, RegisteredNamesAndUnknownSites) {
  sync::register_sites(kSites);
  EXPECT_EQ(sync::describe(report(0, 0, 1, 0, 0)),
            "test kernel: device wait timed out on rank 0 block 3 thread 128: mbarrier full (stage 1) "
            "(index 1, expected 0, saw 0)");
  EXPECT_NE(sync::describe(report(9, 0, -1, 1, 0)).find("site 9"), std::string::npos);
  sync::WaitReport other = report(0, 1, -1, 1, 0);
  other.kernel = static_cast<int>(sync::Kernel::moe);  // no table registered in this process
  EXPECT_NE(sync::describe(other).find("kernel 6: device wait timed out on rank 1"), std::string::npos)
      << sync::describe(other);
}

}  // namespace
