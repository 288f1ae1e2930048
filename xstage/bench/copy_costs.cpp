// measure_copy_costs (xstage/bench/copy_costs.hpp): the copy engine's rate and its cost per
// stream operation, as the benches' drains meet them; measure_host_read_GBps: the SMs'
// read rate of mapped host memory, as the MoE drain's reads back meet it.
#include "xstage/bench/copy_costs.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "hbm_load.hpp"
#include "host_read.hpp"
#include "xstage/bench/event_timer.hpp"

namespace xstage::bench {

burstgap::CopyCosts measure_copy_costs(const CopyCostProbe& probe) {
  XS_ASSERT(probe.streams >= 1 && probe.pairs >= 1 && probe.copy && probe.bulk && probe.bulk_bytes > 0 &&
                probe.copy_bytes >= 0,
            "measure_copy_costs: needs streams and pairs >= 1 (got {}, {}), a copy and a bulk copy of bytes > 0",
            probe.streams, probe.pairs);
  const int n = probe.streams;
  DeviceBuffer<unsigned> met(1);  // every wait is met: only the operation's cost is timed
  fill_device(met.get(), 0, sizeof(unsigned));
  std::unique_ptr<HbmLoad> load;
  if (probe.under_hbm_load) load = std::make_unique<HbmLoad>(std::size_t(256) << 20);
  std::vector<cudaStream_t> s(n + 1);  // the last one runs the load
  std::vector<cudaEvent_t> end(n);
  for (auto& stream : s) XS_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (auto& e : end) XS_CHECK_CUDA(cudaEventCreate(&e));
  EventTimer timer(s[0], "copy-engine costs");
  double ops_ms = 0, bulk_ms = 0;
  for (int pass = 0; pass < 2; ++pass) {
    bulk_ms = timer([&] { probe.bulk(s[0]); }, 1);
    if (load) load->start(s[n], 5.0);
    ops_ms = timer(
        [&] {
          for (int r = 1; r < n; ++r) XS_CHECK_CUDA(cudaStreamWaitEvent(s[r], timer.start(), 0));
          for (int i = 0; i < probe.pairs; ++i)
            for (int r = 0; r < n; ++r) {
              common::stream_wait_geq(s[r], met.get(), 0);
              probe.copy(s[r], r, i);
            }
          for (int r = 1; r < n; ++r) {
            XS_CHECK_CUDA(cudaEventRecord(end[r], s[r]));
            XS_CHECK_CUDA(cudaStreamWaitEvent(s[0], end[r], 0));
          }
        },
        1);  // s[0] has joined the other streams
    if (load) {
      load->stop_after(s[0]);
      XS_CHECK_CUDA(cudaStreamSynchronize(s[n]));
    }
  }
  for (auto& e : end) XS_CHECK_CUDA(cudaEventDestroy(e));
  for (auto& stream : s) XS_CHECK_CUDA(cudaStreamDestroy(stream));
  const double GBps = probe.bulk_bytes / (bulk_ms * 1e6);
  const double bytes_ms = double(n) * probe.pairs * probe.copy_bytes / (GBps * 1e6);
  return {std::max(0.0, ops_ms - bytes_ms) / (2.0 * n * probe.pairs), GBps};
}

double measure_host_read_GBps(const void* device_view, std::size_t bytes, cudaStream_t stream) {
  XS_ASSERT(device_view != nullptr && bytes >= 16, "measure_host_read_GBps: needs mapped memory of >= 16 bytes (got {})",
            bytes);
  DeviceBuffer<unsigned> sink(1);
  EventTimer timer(stream, "host-memory read");
  double ms = 0;
  for (int pass = 0; pass < 2; ++pass)  // the first warms the path up
    ms = timer([&] { launch_host_read(device_view, bytes, sink.get(), stream); }, 1);
  return double(bytes / 16 * 16) / (ms * 1e6);
}

}  // namespace xstage::bench
