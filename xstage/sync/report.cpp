#include "xstage/sync/report.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "common/check.hpp"

namespace xstage::sync {

namespace {
std::array<std::atomic<const SiteNames*>, static_cast<int>(Kernel::count)> g_sites{};

// `name` with every "{index}" replaced by the index.
std::string with_index(std::string name, int index) {
  static constexpr char kKey[] = "{index}";
  for (std::size_t at = name.find(kKey); at != std::string::npos; at = name.find(kKey, at))
    name.replace(at, sizeof kKey - 1, std::to_string(index));
  return name;
}
}  // namespace

unsigned long long wait_budget_ns() {
  constexpr unsigned long long kDefaultMs = 10'000;
  unsigned long long ms = kDefaultMs;
  if (const char* s = std::getenv("XSTAGE_WAIT_TIMEOUT_MS")) {
    char* end = nullptr;
    const long long v = std::strtoll(s, &end, 10);
    XS_ASSERT(end && *end == '\0' && v > 0, "XSTAGE_WAIT_TIMEOUT_MS='{}' is not a positive integer", s);
    ms = static_cast<unsigned long long>(v);
  }
  return ms * 1'000'000ull;
}

void register_sites(const SiteNames& names) {
  const int k = static_cast<int>(names.kernel);
  XS_ASSERT(k > 0 && k < static_cast<int>(Kernel::count), "sync: site names for an unknown kernel {}", k);
  g_sites[k].store(&names, std::memory_order_release);
}

std::string describe(const WaitReport& r, const SiteNames* names) {
  if (names == nullptr && r.kernel > 0 && r.kernel < static_cast<int>(Kernel::count))
    names = g_sites[r.kernel].load(std::memory_order_acquire);
  const std::string kernel = names ? names->kernel_name : fmt::format("kernel {}", r.kernel);
  const std::string site = names && r.site >= 0 && r.site < names->count ? with_index(names->names[r.site], r.index)
                                                                          : fmt::format("site {}", r.site);
  const std::string rank = r.rank >= 0 ? fmt::format(" on rank {}", r.rank) : std::string();
  const std::string index = r.index >= 0 ? fmt::format("index {}, ", r.index) : std::string();
  return fmt::format("{}: device wait timed out{} block {} thread {}: {} ({}expected {}, saw {})", kernel, rank,
                     r.block, r.thread, site, index, r.expected, r.seen);
}

MappedReport::MappedReport() {
  void* h = nullptr;
  cudaError_t err = cudaHostAlloc(&h, sizeof(WaitReport), cudaHostAllocMapped | cudaHostAllocPortable);
  XS_ASSERT(err == cudaSuccess, "cannot allocate a wait report: {}", cudaGetErrorString(err));
  std::memset(h, 0, sizeof(WaitReport));
  void* d = nullptr;
  err = cudaHostGetDevicePointer(&d, h, 0);
  XS_ASSERT(err == cudaSuccess, "cannot map a wait report: {}", cudaGetErrorString(err));
  host_ = static_cast<WaitReport*>(h);
  device_ = static_cast<WaitReport*>(d);
}

MappedReport::~MappedReport() {
  if (host_) cudaFreeHost(host_);
}

bool MappedReport::raised() const { return static_cast<volatile WaitReport*>(host_)->flag != 0; }

WaitReport MappedReport::read() const {
  WaitReport copy;
  std::memcpy(&copy, host_, sizeof copy);  // the kernel that wrote it has ended
  return copy;
}

std::string MappedReport::take(const SiteNames* names) {
  if (!raised()) return {};
  const std::string s = describe(read(), names);
  static_cast<volatile WaitReport*>(host_)->flag = 0;
  return s;
}

MappedReport& process_report() {
  static MappedReport* report = new MappedReport;  // never freed: kernels may still hold it at exit
  return *report;
}

WaitContext wait_context(Kernel k, int rank, unsigned long long budget_ns) {
  return {budget_ns, rank, static_cast<int>(k), process_report().device()};
}

std::string take_report() { return process_report().take(); }

}  // namespace xstage::sync
