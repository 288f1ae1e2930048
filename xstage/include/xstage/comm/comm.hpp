// Communication layer: one rank per GPU over NCCL 2.28's device API.
//
// Host sequence (what every kernel of this project relies on):
//   1. run_ranks() starts one rank per GPU, as threads of this process
//      (Launch::threads) or as forked processes (Launch::processes); rank 0 makes
//      the NCCL unique id and hands it to the others before any CUDA call.
//   2. Rank::Rank() -> ncclCommInitRank (NVLS off: NCCL_NVLS_ENABLE=0 is forced).
//   3. SymmetricWindow -> ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC):
//      the same offset is valid on every rank; kernels reach peers' copies through
//      LSA pointers (xstage/comm/device.cuh).
//   4. DeviceComm -> ncclDevCommCreate with LSA barriers, passed to kernels by value.
//   5. Teardown in reverse order by RAII (device comm, window, memory, communicator).
// Collective steps (3, 4) must be entered by all ranks in the same order.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstddef>
#include <functional>
#include <string>

namespace xstage::comm {

enum class Launch { threads, processes };

// Budget of one device-side wait, in ns (sync::wait_budget_ns: XSTAGE_WAIT_TIMEOUT_MS,
// default 10 s). Kernels get it by value in their sync::WaitContext.
unsigned long long wait_timeout_ns();

class Rank {
 public:
  Rank(ncclUniqueId id, int nranks, int rank, int device);
  ~Rank();
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return device_; }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  // Host-side barrier over all ranks (a one-word ncclAllReduce), for driver code.
  void host_barrier();

 private:
  int rank_, nranks_, device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int* barrier_word_ = nullptr;
};

// A buffer of `bytes` on every rank, registered as a symmetric window.
class SymmetricWindow {
 public:
  SymmetricWindow(Rank& rank, std::size_t bytes);  // collective
  ~SymmetricWindow();
  SymmetricWindow(const SymmetricWindow&) = delete;
  SymmetricWindow& operator=(const SymmetricWindow&) = delete;

  void* local() const { return ptr_; }
  ncclWindow_t window() const { return win_; }
  std::size_t bytes() const { return bytes_; }

 private:
  Rank& rank_;
  void* ptr_ = nullptr;
  ncclWindow_t win_ = nullptr;
  std::size_t bytes_ = 0;
};

// The device communicator; `lsa_barriers` independent LSA barriers (one per block
// that needs a cross-GPU barrier). With one rank none is created (NCCL has no
// symmetric memory for a one-rank communicator): get() is then zeroed, and a
// kernel run on one rank must not use it (nothing to reach or wait for).
class DeviceComm {
 public:
  DeviceComm(Rank& rank, int lsa_barriers);  // collective
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  const ncclDevComm& get() const { return dev_; }
  int lsa_barriers() const { return lsa_barriers_; }

 private:
  Rank& rank_;
  ncclDevComm dev_{};
  int lsa_barriers_;
};

// Number of CUDA devices visible; throws with a clear message when none.
int visible_gpus();

// Runs body(rank) once per rank, ranks 0..nranks-1 on devices 0..nranks-1.
// Throws common::Error if nranks exceeds the visible GPUs, or if any rank threw /
// exited non-zero (the first rank's message is reported). With processes, body
// runs in children; their stderr is shared with the caller.
void run_ranks(int nranks, Launch launch, const std::function<void(Rank&)>& body);

Launch parse_launch(const std::string& s);  // "threads" | "processes"

}  // namespace xstage::comm
