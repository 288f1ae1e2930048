// Where a timed-out device wait reports before it ends the kernel, and how the host names it.
//
// Every kernel that waits carries a WaitContext by value in its parameters: the
// budget of one wait (ns of %globaltimer), its rank, which kernel it is, and the
// host-mapped WaitReport. The first waiter of any CTA to run out of budget claims the
// report (atomicCAS on flag: 2 while it writes, then 1), fills it and ends the kernel
// with a fault (sync/wait.cuh); the host reads it after the failed synchronisation,
// because host-mapped memory outlives the CUDA context the fault killed. Kernels write it
// with plain stores, never printf: a call anywhere in a kernel makes ptxas
// serialise its wgmma instructions (warning C7510).
//
// Sites: each kernel declares `enum class XxxSite : int` (0, 1, ...) and a table of
// their names (SiteNames), registered once by its launcher; a name may contain
// "{index}", replaced by the report's index. describe() turns any report into one
// line: kernel, rank, block, thread, site by name, index, expected and seen.
#pragma once

#include <cstdint>
#include <string>

namespace xstage::sync {

// Which kernel a report comes from (WaitContext::kernel).
enum class Kernel : int { none = 0, comm, probe, attention, ulysses, qkv, moe, test, count };

struct WaitReport {
  int flag;                 // 0: none; 2: being written (the fault may land first: still a report); 1: written
  int kernel;               // Kernel
  int site;                 // the kernel's XxxSite
  int rank;                 // -1 when the kernel does not know its rank
  int block, thread;        // who waited
  int index;                // stage, slot, peer, expert ...; -1 if none
  uint32_t expected, seen;  // counters: target and last value; mbarriers: the parity, and 0
};

// What a waiting kernel carries. Host code sets budget_ns and rank (brace order); the
// launcher sets kernel and report (wait_context()).
struct WaitContext {
  unsigned long long budget_ns = 0;  // one budget; a wait may take several (sync/wait.cuh)
  int rank = -1;
  int kernel = 0;                    // Kernel
  WaitReport* report = nullptr;      // device pointer of a host-mapped report; null: the fault only
};

// A kernel's site names: names[site] for site in [0, count).
struct SiteNames {
  Kernel kernel;
  const char* kernel_name;  // starts the line: "moe fused", "fused QKV", ...
  const char* const* names;
  int count;
};

// The budget of one wait: XSTAGE_WAIT_TIMEOUT_MS (default 10 s), in ns.
unsigned long long wait_budget_ns();

// Makes `names` the table describe() uses for its kernel (idempotent; launchers call it).
void register_sites(const SiteNames& names);

// One line for a report (see the top); `names` null: the registered table of r.kernel.
std::string describe(const WaitReport& r, const SiteNames* names = nullptr);

// A host-mapped report: device() goes into a WaitContext, take() reads it after a
// failed synchronisation ("" when no wait reported) and clears it.
class MappedReport {
 public:
  MappedReport();
  ~MappedReport();
  MappedReport(const MappedReport&) = delete;
  MappedReport& operator=(const MappedReport&) = delete;
  WaitReport* device() const { return device_; }
  bool raised() const;      // a wait has claimed the report
  WaitReport read() const;  // a copy of the report as it is
  std::string take(const SiteNames* names = nullptr);

 private:
  WaitReport* host_ = nullptr;
  WaitReport* device_ = nullptr;
};

// The process-wide report (created on first use): the attention, Ulysses, QKV, probe
// and comm kernels share it (the first wait to time out anywhere in the process wins).
MappedReport& process_report();
// A context on the process-wide report: kernel `k` on `rank`, `budget_ns` per budget.
WaitContext wait_context(Kernel k, int rank, unsigned long long budget_ns = wait_budget_ns());
// process_report().take(): the timed-out wait of any kernel in one line, or "".
std::string take_report();

}  // namespace xstage::sync
