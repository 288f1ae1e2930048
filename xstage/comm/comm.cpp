// Host side of the communication layer (see xstage/include/xstage/comm.hpp).
#include "xstage/comm/comm.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/sync/report.hpp"

namespace xstage::comm {

namespace {

// NVLink multicast is never used by this project (it can take a shared host's
// GPUs out of service); force it off before NCCL reads its environment.
void force_multicast_off() {
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  ::setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  ::setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
}

// How long the surviving ranks get to finish after one rank failed, before the
// process reports the failure and exits instead of hanging in a collective.
constexpr auto kFailureGrace = std::chrono::seconds(20);

}  // namespace

unsigned long long wait_timeout_ns() { return sync::wait_budget_ns(); }

Rank::Rank(ncclUniqueId id, int nranks, int rank, int device) : rank_(rank), nranks_(nranks), device_(device) {
  XS_CHECK_CUDA(cudaSetDevice(device));
  XS_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  XS_CHECK_CUDA(cudaMalloc(&barrier_word_, sizeof(int)));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = "xstage";
  XS_CHECK_NCCL(ncclCommInitRankConfig(&comm_, nranks, id, rank, &config));
}

Rank::~Rank() {
  cudaSetDevice(device_);
  if (comm_) {
    ncclCommFinalize(comm_);
    ncclCommDestroy(comm_);
  }
  if (barrier_word_) cudaFree(barrier_word_);
  if (stream_) cudaStreamDestroy(stream_);
}

void Rank::host_barrier() {
  XS_CHECK_CUDA(cudaSetDevice(device_));
  XS_CHECK_NCCL(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_));
  XS_CHECK_CUDA(cudaStreamSynchronize(stream_));
}

SymmetricWindow::SymmetricWindow(Rank& rank, std::size_t bytes) : rank_(rank), bytes_(bytes) {
  XS_ASSERT(bytes > 0, "symmetric window of 0 bytes");
  XS_CHECK_CUDA(cudaSetDevice(rank.device()));
  XS_CHECK_NCCL(ncclMemAlloc(&ptr_, bytes));
  fill_device(ptr_, 0, bytes);
  XS_CHECK_NCCL(ncclCommWindowRegister(rank.comm(), ptr_, bytes, &win_, NCCL_WIN_COLL_SYMMETRIC));
}

SymmetricWindow::~SymmetricWindow() {
  cudaSetDevice(rank_.device());
  if (win_) ncclCommWindowDeregister(rank_.comm(), win_);
  if (ptr_) ncclMemFree(ptr_);
}

DeviceComm::DeviceComm(Rank& rank, int lsa_barriers) : rank_(rank), lsa_barriers_(lsa_barriers) {
  XS_ASSERT(lsa_barriers >= 1, "need at least one LSA barrier");
  XS_CHECK_CUDA(cudaSetDevice(rank.device()));
  // NCCL refuses a device communicator on a one-rank communicator ("does not support
  // symmetric memory"); there is no peer to reach or wait for, so none is made.
  if (rank.nranks() == 1) return;
  ncclDevCommRequirements reqs{};
  reqs.lsaMultimem = false;  // multicast stays off
  reqs.lsaBarrierCount = lsa_barriers;
  const ncclResult_t res = ncclDevCommCreate(rank.comm(), &reqs, &dev_);
  if (res != ncclSuccess) {
    XS_FAIL("ncclDevCommCreate failed on rank {}: {} — this node/driver does not support NCCL's device API "
            "(needs NCCL >= 2.28, CUDA P2P/NVLink between the GPUs, and symmetric memory)",
            rank.rank(), ncclGetErrorString(res));
  }
  XS_ASSERT(dev_.lsaSize == rank.nranks(),
            "rank {}: only {} of {} ranks are load/store-accessible (LSA); xstage needs one NVLink node",
            rank.rank(), dev_.lsaSize, rank.nranks());
}

DeviceComm::~DeviceComm() {
  if (rank_.nranks() == 1) return;
  cudaSetDevice(rank_.device());
  ncclDevCommDestroy(rank_.comm(), &dev_);
}

int visible_gpus() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) return 0;
  XS_CHECK_CUDA(err);
  return n;
}

Launch parse_launch(const std::string& s) {
  if (s == "threads") return Launch::threads;
  if (s == "processes") return Launch::processes;
  XS_FAIL("unknown launch '{}' (threads, processes)", s);
}

namespace {

void run_threads(int nranks, const std::function<void(Rank&)>& body) {
  const int gpus = visible_gpus();
  XS_ASSERT(nranks <= gpus, "{} ranks requested but only {} GPU(s) visible", nranks, gpus);
  ncclUniqueId id;
  XS_CHECK_NCCL(ncclGetUniqueId(&id));

  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      std::string err;
      try {
        Rank rank(id, nranks, r, r);
        body(rank);
      } catch (const std::exception& e) {
        err = fmt::format("rank {}: {}", r, e.what());
      }
      std::lock_guard lock(mu);
      if (!err.empty() && first_error.empty()) first_error = err;
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return finished == nranks || !first_error.empty(); });
    if (finished != nranks &&
        !cv.wait_for(lock, kFailureGrace, [&] { return finished == nranks; })) {
      // The other ranks are stuck in a collective with the failed one: report, don't hang.
      std::fprintf(stderr, "xstage: error: %s (other ranks did not finish; exiting)\n", first_error.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) throw common::Error(first_error);
}

void run_processes(int nranks, const std::function<void(Rank&)>& body) {
  // No CUDA call may happen in this process before fork(); children do everything.
  std::vector<int> write_fds, read_fds;
  for (int r = 0; r < nranks; ++r) {
    int fds[2];
    XS_ASSERT(::pipe(fds) == 0, "pipe() failed");
    read_fds.push_back(fds[0]);
    write_fds.push_back(fds[1]);
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = ::fork();
    XS_ASSERT(pid >= 0, "fork() failed");
    if (pid == 0) {
      int code = 0;
      try {
        ncclUniqueId id;
        if (r == 0) {
          XS_CHECK_NCCL(ncclGetUniqueId(&id));
          for (int k = 1; k < nranks; ++k)
            XS_ASSERT(::write(write_fds[k], &id, sizeof(id)) == sizeof(id), "pipe write failed");
        } else {
          XS_ASSERT(::read(read_fds[r], &id, sizeof(id)) == sizeof(id), "rank 0 did not send the NCCL id");
        }
        const int gpus = visible_gpus();
        XS_ASSERT(nranks <= gpus, "{} ranks requested but only {} GPU(s) visible", nranks, gpus);
        Rank rank(id, nranks, r, r);
        body(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "xstage: rank %d: error: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(code);
    }
    pids.push_back(pid);
  }
  for (int fd : write_fds) ::close(fd);
  for (int fd : read_fds) ::close(fd);
  // Wait; once one child failed, give the others a grace period, then stop them.
  std::vector<int> status(nranks, -1);
  int remaining = nranks;
  bool failed = false;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (remaining > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, failed ? WNOHANG : 0);
    if (pid > 0) {
      for (int r = 0; r < nranks; ++r)
        if (pids[r] == pid) status[r] = st;
      --remaining;
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !failed) {
        failed = true;
        deadline = std::chrono::steady_clock::now() + kFailureGrace;
      }
      continue;
    }
    if (failed && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r)
        if (status[r] == -1) ::kill(pids[r], SIGKILL);
      failed = false;  // block in waitpid for the killed children
      deadline = std::chrono::steady_clock::time_point::max();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::string bad;
  for (int r = 0; r < nranks; ++r) {
    if (!(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0))
      bad += fmt::format("{}{}", bad.empty() ? "" : ",", r);
  }
  XS_ASSERT(bad.empty(), "rank process(es) {} failed (see their messages above)", bad);
}

}  // namespace

void run_ranks(int nranks, Launch launch, const std::function<void(Rank&)>& body) {
  XS_ASSERT(nranks >= 1 && nranks <= 64, "rank count {} out of range 1..64", nranks);
  force_multicast_off();
  if (launch == Launch::threads) run_threads(nranks, body);
  else run_processes(nranks, body);
}

}  // namespace xstage::comm
