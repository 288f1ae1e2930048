// GPU tests of the communication layer: symmetric windows, LSA pointers, LSA
// barriers with timeouts, release/acquire flags; threads and processes; and a
// device wait that must time out with a message instead of hanging.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/test_child.hpp"
#include "common/cuda_check.hpp"
#include "xstage/comm/comm.hpp"
#include "xstage/comm/device.cuh"
#include "common/device_buffer.hpp"
#include "xstage/sync/report.hpp"
#include "xstage/sync/wait.cuh"

namespace {

namespace sync = xstage::sync;

// This test's wait sites and their names.
enum class TestSite : int { lsa_barrier, test_flag, never_set };
constexpr const char* kTestSiteNames[] = {"LSA barrier arrival of peer {index}", "test flag", "a flag nobody sets"};
constexpr sync::SiteNames kTestSites{sync::Kernel::test, "comm test", kTestSiteNames,
                                     static_cast<int>(std::size(kTestSiteNames))};
// A context on the process-wide report for `rank`.
sync::WaitContext test_context(int rank) {
  sync::register_sites(kTestSites);
  return sync::wait_context(sync::Kernel::test, rank, xstage::comm::wait_timeout_ns());
}

constexpr int kWords = 4096;  // per (source rank) slot

__host__ __device__ uint32_t word_of(int src, int dst, int i, uint32_t round) {
  return 0x1000193u * (src + 1) + 0x9E3779B1u * (dst + 1) + 7u * i + round * 0x85EBCA77u;
}

// Each rank writes a slot into every peer's window through LSA pointers, crosses
// an LSA barrier, then checks what the peers wrote into its own window.
__global__ void exchange_kernel(ncclDevComm dev, ncclWindow_t win, uint32_t round, sync::WaitContext budget,
                                int* errors) {
  const int me = dev.rank, n = dev.nRanks;
  for (int peer = 0; peer < n; ++peer) {
    uint32_t* dst = static_cast<uint32_t*>(ncclGetLsaPointer(win, 0, peer)) + me * kWords;
    for (int i = threadIdx.x; i < kWords; i += blockDim.x) dst[i] = word_of(me, peer, i, round);
  }
  xstage::comm::lsa_barrier_sync(dev, 0, budget, TestSite::lsa_barrier);
  const uint32_t* mine = static_cast<const uint32_t*>(ncclGetLocalPointer(win, 0));
  for (int src = 0; src < n; ++src)
    for (int i = threadIdx.x; i < kWords; i += blockDim.x)
      if (mine[src * kWords + i] != word_of(src, me, i, round)) atomicAdd(errors, 1);
  xstage::comm::lsa_barrier_sync(dev, 0, budget, TestSite::lsa_barrier);  // nobody overwrites before all checked
}

// Rank r sends a payload and releases a flag to rank (r+1)%n; the receiver
// acquires the flag and must then see the whole payload.
constexpr std::size_t kFlagOff = 1 << 20;
__global__ void flag_kernel(ncclDevComm dev, ncclWindow_t win, uint32_t value, sync::WaitContext budget, int* errors) {
  const int me = dev.rank, n = dev.nRanks, next = (me + 1) % n, prev = (me + n - 1) % n;
  uint32_t* payload = static_cast<uint32_t*>(ncclGetLsaPointer(win, 0, next));
  for (int i = threadIdx.x; i < kWords; i += blockDim.x) payload[i] = word_of(me, next, i, value);
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* flag = static_cast<uint32_t*>(ncclGetLsaPointer(win, kFlagOff, next));
    xstage::comm::signal_release(flag, value);
    sync::wait_geq_acquire(budget, static_cast<uint32_t*>(ncclGetLocalPointer(win, kFlagOff)), value,
                           TestSite::test_flag, prev);
  }
  __syncthreads();
  const uint32_t* mine = static_cast<const uint32_t*>(ncclGetLocalPointer(win, 0));
  for (int i = threadIdx.x; i < kWords; i += blockDim.x)
    if (mine[i] != word_of(prev, me, i, value)) atomicAdd(errors, 1);
}

__global__ void never_set_kernel(const uint32_t* flag, sync::WaitContext budget) {
  sync::wait_geq_acquire(budget, flag, 1u, TestSite::never_set, -1);
}

void exchange_body(xstage::comm::Rank& rank) {
  xstage::comm::SymmetricWindow win(rank, kFlagOff + 4096);
  xstage::comm::DeviceComm dev(rank, 1);
  xstage::DeviceBuffer<int> errors(1);
  const sync::WaitContext budget = test_context(rank.rank());
  for (uint32_t round = 1; round <= 3; ++round) {
    XS_CHECK_CUDA(cudaMemsetAsync(errors.get(), 0, sizeof(int), rank.stream()));
    exchange_kernel<<<1, 256, 0, rank.stream()>>>(dev.get(), win.window(), round, budget, errors.get());
    XS_CHECK_LAUNCH();
    flag_kernel<<<1, 256, 0, rank.stream()>>>(dev.get(), win.window(), 100 + round, budget, errors.get());
    XS_CHECK_LAUNCH();
    XS_CHECK_CUDA(cudaStreamSynchronize(rank.stream()));
    const int wrong = errors.to_host(1)[0];
    if (wrong != 0)
      throw std::runtime_error("rank " + std::to_string(rank.rank()) + " round " + std::to_string(round) + ": " +
                               std::to_string(wrong) + " words wrong");
  }
  rank.host_barrier();
}

int gpus() { return xstage::comm::visible_gpus(); }

}  // namespace

TEST(CommGpu, ExchangeAndFlagsThreadsAllGpus) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  EXPECT_NO_THROW(xstage::comm::run_ranks(gpus(), xstage::comm::Launch::threads, exchange_body));
}

TEST(CommGpu, ExchangeAndFlagsTwoRanksThreads) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  EXPECT_NO_THROW(xstage::comm::run_ranks(2, xstage::comm::Launch::threads, exchange_body));
}

TEST(CommGpu, TooManyRanksIsAClearError) {
  try {
    xstage::comm::run_ranks(gpus() + 1, xstage::comm::Launch::threads, [](xstage::comm::Rank&) {});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU(s) visible"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "wrong exception type: " << e.what();
  }
}

// The process-mode run and the timeout run need a process that has not touched
// CUDA before fork(): the test re-executes this binary with --child=NAME.
std::pair<int, std::string> run_child(const std::string& name) {
  return common::run_self_as_child(name, "XSTAGE_WAIT_TIMEOUT_MS=300");
}

int child_main(const std::string& name) {
  try {
    if (name == "processes") {
      // Two ranks as forked processes; nothing here has initialised CUDA.
      xstage::comm::run_ranks(2, xstage::comm::Launch::processes, exchange_body);
      return 0;
    }
    if (name == "timeout") {
      XS_CHECK_CUDA(cudaSetDevice(0));
      xstage::DeviceBuffer<uint32_t> flag(1);
      xstage::fill_device(flag.get(), 0, sizeof(uint32_t));
      never_set_kernel<<<1, 1>>>(flag.get(), test_context(0));
      const cudaError_t err = cudaDeviceSynchronize();
      std::printf("child: %s\n", sync::take_report().c_str());
      std::fflush(stdout);
      return err == cudaSuccess ? 0 : 7;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %s: %s\n", name.c_str(), e.what());
    return 1;
  }
  return 2;
}

TEST(CommGpu, ExchangeAndFlagsTwoRanksProcesses) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  auto [code, out] = run_child("processes");
  EXPECT_EQ(code, 0) << out;
}

TEST(CommGpu, DeviceWaitTimesOutWithAMessage) {
  auto [code, out] = run_child("timeout");
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("device wait timed out on rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("a flag nobody sets"), std::string::npos) << out;
  EXPECT_NE(out.find("saw 0"), std::string::npos) << out;
}

int main(int argc, char** argv) { return common::test_main_with_children(argc, argv, child_main); }
