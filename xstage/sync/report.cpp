#include "xstage/hopper/timeout_report.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <mutex>

#include "common/check.hpp"

namespace xstage::hopper {

namespace {
WaitTimeoutReport* g_host = nullptr;
WaitTimeoutReport* g_device = nullptr;
std::once_flag g_once;
}  // namespace

WaitTimeoutReport* timeout_report_device() {
  std::call_once(g_once, [] {
    void* h = nullptr;
    cudaError_t err = cudaHostAlloc(&h, sizeof(WaitTimeoutReport), cudaHostAllocMapped);
    XS_ASSERT(err == cudaSuccess, "cannot allocate the wait-timeout report: {}", cudaGetErrorString(err));
    std::memset(h, 0, sizeof(WaitTimeoutReport));
    void* d = nullptr;
    err = cudaHostGetDevicePointer(&d, h, 0);
    XS_ASSERT(err == cudaSuccess, "cannot map the wait-timeout report: {}", cudaGetErrorString(err));
    g_host = static_cast<WaitTimeoutReport*>(h);
    g_device = static_cast<WaitTimeoutReport*>(d);
  });
  return g_device;
}

std::string take_timeout_report(const char* (*site_name)(int)) {
  if (!g_host) return {};
  volatile WaitTimeoutReport* r = g_host;
  if (r->flag == 0) return {};  // 2: the trap came before the final flag store landed
  const std::string site = site_name ? site_name(r->site) : fmt::format("site {}", r->site);
  std::string s = fmt::format(
      "device wait timed out: block {} thread {} waited on mbarrier '{}'{} (smem 0x{:x}) for phase parity {}",
      r->block, r->thread, site, r->stage >= 0 ? fmt::format(" stage {}", r->stage) : std::string(), r->smem,
      r->parity);
  r->flag = 0;
  return s;
}

std::string take_timeout_report(std::string (*describe)(const WaitTimeoutReport& r)) {
  if (!g_host) return {};
  volatile WaitTimeoutReport* v = g_host;
  if (v->flag == 0) return {};
  WaitTimeoutReport copy;
  std::memcpy(&copy, const_cast<WaitTimeoutReport*>(g_host), sizeof copy);
  v->flag = 0;
  return describe(copy);
}

}  // namespace xstage::hopper
