// Host driver of the X-Stage probe: one thread per GPU (comm::run_ranks), all ranks
// step through the same configuration list in lock step (std::barrier).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "common/check.hpp"
#include "common/progress.hpp"
#include "common/stats.hpp"
#include "sm90_probe.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/comm.hpp"
#include "xstage/device_buffer.hpp"
#include "xstage/probe.hpp"

namespace xstage::probe {

namespace {

StoreKind store_kind(const std::string& s) {
  if (s == "st4") return StoreKind::st4;
  if (s == "st8") return StoreKind::st8;
  if (s == "st16") return StoreKind::st16;
  if (s == "tma") return StoreKind::tma;
  XS_FAIL("unknown store kind '{}' (st4, st8, st16, tma)", s);
}

constexpr int kPingRounds = 200;
constexpr std::size_t kCopyBytes = std::size_t{256} << 20;

// State shared by the rank threads.
struct Shared {
  explicit Shared(int n) : sync(n), seen(n), payload(n), copy_buf(n, nullptr) {}
  std::barrier<> sync;
  std::vector<std::vector<unsigned long long>> seen;  // per rank: observer stamps
  std::vector<void*> payload;                         // per rank: local payload pointer
  std::vector<void*> copy_buf;                        // per rank: copy-engine buffer
  std::vector<long long> verified;                    // filled per rank
  std::mutex mu;
  std::string verify_error;
};

double cycles_per_ns(const SmRecord& r) {
  const double dt = static_cast<double>(r.gt1 - r.gt0);
  XS_ASSERT(dt > 0, "globaltimer did not advance on SM {}", r.smid);
  return static_cast<double>(r.clk1 - r.clk0) / dt;
}

// Checks this rank's payload for the last burst of SMs 0 and sms-1 (bitwise).
long long verify_payload(const ProbeConfig& c, const ProbeOptions& o, int my_rank, void* payload,
                         std::size_t region, uint32_t epoch, std::string& err) {
  const auto dst = destinations(c.pattern, o.gpus);
  const int n_dst = static_cast<int>(dst.size());
  const auto it = std::find(dst.begin(), dst.end(), my_rank);
  if (it == dst.end()) return 0;
  const int my_idx = static_cast<int>(it - dst.begin());
  const StoreKind kind = store_kind(c.store);
  const int row_bytes = probe_row_bytes(kind);
  const uint32_t last = static_cast<uint32_t>(o.warmup + o.bursts - 1);
  long long checked = 0;
  std::vector<uint32_t> host(c.burst_bytes / 4);
  for (int sm : {0, c.sms - 1}) {
    XS_CHECK_CUDA(cudaMemcpy(host.data(), static_cast<char*>(payload) + static_cast<std::size_t>(sm) * region,
                             c.burst_bytes, cudaMemcpyDeviceToHost));
    for (std::size_t w = 0; w < host.size(); ++w) {
      const int row = static_cast<int>(w * 4 / row_bytes);
      if (probe_dst_of_row(row, sm, n_dst) != my_idx) continue;
      const uint32_t expect = kind == StoreKind::tma
                                  ? probe_word(epoch, sm, 0, static_cast<uint32_t>(w % (kTmaChunk / 4)))
                                  : probe_word(epoch, sm, last, static_cast<uint32_t>(w));
      // st8/st16 write consecutive words w0, w0+1, ...: the word index already encodes it.
      if (host[w] != expect && err.empty())
        err = fmt::format("payload mismatch on rank {} ({} {} sms={} burst={}): SM {} word {} = {:#x}, expected {:#x}",
                          my_rank, c.pattern, c.store, c.sms, c.burst_bytes, sm, w, host[w], expect);
      ++checked;
    }
  }
  return checked;
}

SweepRow summarize_config(const ProbeConfig& c, const ProbeOptions& o, const std::vector<BurstRecord>& bursts,
                          const std::vector<SmRecord>& sms, const Shared& shared,
                          const std::vector<double>& offsets) {
  SweepRow row;
  row.gpus = o.gpus;
  row.pattern = c.pattern;
  row.store = c.store;
  row.mode = c.mode;
  row.sms = c.sms;
  row.burst_bytes = static_cast<double>(c.burst_bytes);
  row.gap_ns = c.gap_ns;
  row.bursts = o.bursts;
  row.warmup = o.warmup;
  std::vector<double> issue, period, visible, drain;
  // Aggregate rate over the window in which every SM is issuing (globaltimer is
  // common to all SMs of a GPU): SMs are served unfairly, so some finish their
  // bursts early; summing per-SM rates would count bandwidth they never shared.
  std::vector<std::pair<double, double>> done;  // (globaltimer at issue end, bytes) per burst
  double window_lo = 0, window_hi = std::numeric_limits<double>::max();
  const auto dst = destinations(c.pattern, o.gpus);
  for (int s = 0; s < c.sms; ++s) {
    const double cpn = cycles_per_ns(sms[s]);
    for (int b = 0; b < o.bursts; ++b) {
      const BurstRecord& r = bursts[static_cast<std::size_t>(s) * o.bursts + b];
      const double iss = static_cast<double>(r.clk_issued - r.clk_start) / cpn;
      issue.push_back(iss);
      if (b + 1 < o.bursts) {
        const BurstRecord& n = bursts[static_cast<std::size_t>(s) * o.bursts + b + 1];
        period.push_back(static_cast<double>(n.clk_start - r.clk_start) / cpn);
      }
      const double end = static_cast<double>(r.gt_start) + iss;
      done.emplace_back(end, static_cast<double>(c.burst_bytes));
      if (b == 0) window_lo = std::max(window_lo, static_cast<double>(r.gt_start));
      if (b + 1 == o.bursts) window_hi = std::min(window_hi, end);
      if (c.mode == "visible") {
        drain.push_back(static_cast<double>(r.gt_fenced) - static_cast<double>(r.gt_start));
        double seen_max = 0;
        for (int d : dst) {
          const double seen = static_cast<double>(shared.seen[d][static_cast<std::size_t>(s) * o.bursts + b]);
          seen_max = std::max(seen_max, seen - offsets[d]);
        }
        visible.push_back(seen_max - static_cast<double>(r.gt_start));
      }
    }
  }
  const auto is = common::summarize(issue);
  row.issue_ns_med = is.median;
  row.issue_ns_p10 = is.p10;
  row.issue_ns_p90 = is.p90;
  row.issue_ns_mean = std::accumulate(issue.begin(), issue.end(), 0.0) / static_cast<double>(issue.size());
  row.period_ns_med = period.empty() ? -1 : common::median(period);
  row.period_ns_mean =
      period.empty() ? -1 : std::accumulate(period.begin(), period.end(), 0.0) / static_cast<double>(period.size());
  double first = std::numeric_limits<double>::max(), last = 0, total = 0;
  for (const auto& [t, bytes] : done) {
    first = std::min(first, t);
    last = std::max(last, t);
    total += bytes;
  }
  // The all-SMs-active window must hold a good share of the run to be trusted;
  // otherwise fall back to the whole span.
  if (window_hi - window_lo > 0.25 * (last - first)) {
    double bytes = 0;
    for (const auto& [t, b] : done)
      if (t > window_lo && t <= window_hi) bytes += b;
    row.gbps = bytes / (window_hi - window_lo);  // bytes/ns == GB/s
  } else {
    row.gbps = last > first ? total / (last - first) : -1;
  }
  if (!visible.empty()) {
    const auto vs = common::summarize(visible);
    row.visible_ns_med = vs.median;
    row.visible_ns_p10 = vs.p10;
    row.visible_ns_p90 = vs.p90;
    row.drain_ns_med = common::median(drain);
  }
  return row;
}

void validate(const ProbeOptions& o, int gpus_present, int sm_count) {
  XS_ASSERT(o.gpus >= 1, "--gpus must be >= 1");
  XS_ASSERT(o.gpus <= gpus_present, "--gpus {}: only {} GPU(s) present", o.gpus, gpus_present);
  XS_ASSERT(o.warmup >= 0 && o.bursts >= 2 && o.warmup + o.bursts < (1 << 16), "bad burst counts");
  XS_ASSERT(!o.configs.empty(), "no probe configurations");
  for (const auto& c : o.configs) {
    (void)destinations(c.pattern, o.gpus);  // the pattern, its GPU count and kMaxDst
    (void)store_kind(c.store);
    XS_ASSERT(c.mode == "issue" || c.mode == "visible", "unknown mode '{}' (issue, visible)", c.mode);
    XS_ASSERT(!(c.pattern == "local" && c.mode == "visible"), "visible mode needs a peer pattern");
    XS_ASSERT(c.sms >= 1 && c.sms <= sm_count, "--sms {} outside 1..{} (this GPU's SM count)", c.sms, sm_count);
    XS_ASSERT(c.burst_bytes >= 16 && c.burst_bytes % 16 == 0,
              "burst of {} bytes: must be a positive multiple of 16", c.burst_bytes);
    XS_ASSERT(c.burst_bytes <= (std::size_t{1} << 30), "burst of {} bytes is too large", c.burst_bytes);
    XS_ASSERT(c.burst_bytes * static_cast<std::size_t>(c.sms) <= o.buffer_bytes,
              "burst of {} bytes x {} SMs exceeds the {}-byte buffer (raise --buffer)", c.burst_bytes, c.sms,
              o.buffer_bytes);
    XS_ASSERT(c.gap_ns >= 0 && c.gap_ns < 1e9, "gap {} ns out of range", c.gap_ns);
  }
}

}  // namespace

ProbeResult run_probe(const ProbeOptions& o) {
  const int present = comm::visible_gpus();
  XS_ASSERT(present > 0, "no CUDA GPU is visible: the probe needs at least one");
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  validate(o, present, prop.multiProcessorCount);

  ProbeResult result;
  result.card = prop.name;
  result.gpus = o.gpus;
  result.sm_count = prop.multiProcessorCount;
  result.clock_offset_ns.assign(o.gpus, 0.0);
  result.ping_rtt_ns.assign(o.gpus, 0.0);
  std::size_t max_burst = 0;
  int max_sms = 0;
  for (const auto& c : o.configs) {
    max_burst = std::max(max_burst, c.burst_bytes);
    max_sms = std::max(max_sms, c.sms);
  }
  // Region per SM: the largest burst, 128-byte aligned, capped by the buffer.
  const std::size_t region = (max_burst + 127) / 128 * 128;
  XS_ASSERT(region * static_cast<std::size_t>(max_sms) <= o.buffer_bytes,
            "largest burst ({} B) x most SMs ({}) exceeds the {}-byte buffer (raise --buffer)", max_burst, max_sms,
            o.buffer_bytes);

  Shared shared(o.gpus);
  shared.verified.assign(o.gpus, 0);
  std::vector<SweepRow> rows(o.configs.size());

  comm::run_ranks(o.gpus, comm::Launch::threads, [&](comm::Rank& rank) {
    const int me = rank.rank();
    cudaStream_t st = rank.stream();
    comm::SymmetricWindow win(rank, kPayloadOffset + o.buffer_bytes);
    shared.payload[me] = static_cast<char*>(win.local()) + kPayloadOffset;
    const comm::WaitBudget budget{comm::wait_timeout_ns(), me};

    const std::size_t nrec = static_cast<std::size_t>(max_sms) * o.bursts;
    DeviceBuffer<BurstRecord> d_bursts(nrec);
    DeviceBuffer<SmRecord> d_sms(max_sms);
    DeviceBuffer<unsigned long long> d_seen(nrec), d_ping(2 * kPingRounds);
    DeviceBuffer<float> d_sink(kBlockThreads);
    rank.host_barrier();  // every window registered before any peer access

    // Clock offsets: rank 0 pings each receiver in turn (NTP-style, fastest round).
    // The GPUs' timers drift apart by microseconds over a sweep, so this runs
    // before every visible-mode configuration. All ranks must call it together.
    uint32_t ping_base = 0;
    auto calibrate_clocks = [&] {
      for (int r = 1; r < o.gpus; ++r) {
        ping_base += kPingRounds + 1;
        PingArgs pa{win.window(), me == 0 ? r : 0, kPingRounds, ping_base, d_ping.get(), budget};
        if (me == 0) launch_ping_sender(pa, st);
        if (me == r) launch_ping_echo(pa, st);
        XS_CHECK_CUDA(cudaStreamSynchronize(st));
        if (me == 0 || me == r) shared.seen[me] = d_ping.to_host(2 * kPingRounds);
        shared.sync.arrive_and_wait();
        if (me == 0) {
          double best_rtt = std::numeric_limits<double>::max(), offset = 0;
          for (int i = 0; i < kPingRounds; ++i) {
            const double a = static_cast<double>(shared.seen[0][2 * i]);
            const double c = static_cast<double>(shared.seen[0][2 * i + 1]);
            const double b = static_cast<double>(shared.seen[r][i]);
            if (c - a < best_rtt) {
              best_rtt = c - a;
              offset = b - (a + c) / 2;
            }
          }
          result.clock_offset_ns[r] = offset;
          result.ping_rtt_ns[r] = best_rtt;
        }
        shared.sync.arrive_and_wait();
      }
    };
    calibrate_clocks();

    // Copy-engine reference: cudaMemcpyPeer rank 0 -> rank 1.
    if (o.copy_engine && o.gpus >= 2) {
      if (me <= 1) XS_CHECK_CUDA(cudaMalloc(&shared.copy_buf[me], kCopyBytes));
      shared.sync.arrive_and_wait();
      if (me == 0) {
        cudaEvent_t e0, e1;
        XS_CHECK_CUDA(cudaEventCreate(&e0));
        XS_CHECK_CUDA(cudaEventCreate(&e1));
        std::vector<double> ms;
        for (int i = 0; i < 13; ++i) {
          XS_CHECK_CUDA(cudaEventRecord(e0, st));
          XS_CHECK_CUDA(cudaMemcpyPeerAsync(shared.copy_buf[1], 1, shared.copy_buf[0], 0, kCopyBytes, st));
          XS_CHECK_CUDA(cudaEventRecord(e1, st));
          XS_CHECK_CUDA(cudaEventSynchronize(e1));
          float t = 0;
          XS_CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
          if (i >= 3) ms.push_back(t);
        }
        result.copy_engine_GBps = static_cast<double>(kCopyBytes) / (common::median(ms) * 1e6);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
      }
      shared.sync.arrive_and_wait();
      if (me <= 1) XS_CHECK_CUDA(cudaFree(shared.copy_buf[me]));
    }

    // The sweep.
    std::unique_ptr<common::ProgressBar> bar;
    if (me == 0) bar = std::make_unique<common::ProgressBar>("probe", o.configs.size(), o.progress);
    uint32_t flag_base = 1u << 20;
    std::vector<BurstRecord> h_bursts;
    std::vector<SmRecord> h_sms;
    for (std::size_t i = 0; i < o.configs.size(); ++i) {
      const ProbeConfig& c = o.configs[i];
      const auto dst = destinations(c.pattern, o.gpus);
      const uint32_t epoch = static_cast<uint32_t>(i + 1);
      const bool visible = c.mode == "visible";
      if (visible) calibrate_clocks();
      shared.sync.arrive_and_wait();
      if (visible && me != 0 && std::find(dst.begin(), dst.end(), me) != dst.end()) {
        ObserverArgs oa{win.window(), c.sms, o.warmup, o.bursts, flag_base, d_seen.get(), budget};
        launch_observer(oa, st);
      }
      if (me == 0) {
        SenderArgs sa{};
        sa.window = win.window();
        if (o.gpus == 1) {  // no LSA pointers on a one-rank communicator (SenderArgs)
          sa.self_payload = static_cast<char*>(win.local()) + kPayloadOffset;
          sa.self_flags = reinterpret_cast<uint32_t*>(static_cast<char*>(win.local()) + kFlagOffset);
        }
        sa.n_dst = static_cast<int>(dst.size());
        for (int d = 0; d < sa.n_dst; ++d) sa.dst_rank[d] = dst[d];
        sa.store = store_kind(c.store);
        sa.burst_bytes = static_cast<int>(c.burst_bytes);
        sa.region_bytes = region;
        sa.warmup = o.warmup;
        sa.bursts = o.bursts;
        sa.gap_ns = static_cast<long long>(c.gap_ns);
        sa.visible = visible ? 1 : 0;
        sa.flag_base = flag_base;
        sa.epoch = epoch;
        sa.bursts_out = d_bursts.get();
        sa.sms_out = d_sms.get();
        sa.sink = d_sink.get();
        sa.wait = budget;
        launch_sender(sa, c.sms, st);
      }
      XS_CHECK_CUDA(cudaStreamSynchronize(st));
      shared.sync.arrive_and_wait();  // all kernels of this config are done
      if (visible && me != 0) {
        shared.seen[me] = d_seen.to_host(static_cast<std::size_t>(c.sms) * o.bursts);
      }
      std::string err;
      shared.verified[me] += verify_payload(c, o, me, shared.payload[me], region, epoch, err);
      if (!err.empty()) {
        std::lock_guard lock(shared.mu);
        if (shared.verify_error.empty()) shared.verify_error = err;
      }
      shared.sync.arrive_and_wait();
      if (me == 0) {
        XS_ASSERT(shared.verify_error.empty(), "{}", shared.verify_error);
        h_bursts = d_bursts.to_host(static_cast<std::size_t>(c.sms) * o.bursts);
        h_sms = d_sms.to_host(c.sms);
        std::vector<int> ids;
        for (const auto& s : h_sms) ids.push_back(s.smid);
        std::sort(ids.begin(), ids.end());
        XS_ASSERT(std::adjacent_find(ids.begin(), ids.end()) == ids.end(),
                  "two probe blocks shared an SM ({} SMs requested)", c.sms);
        rows[i] = summarize_config(c, o, h_bursts, h_sms, shared, result.clock_offset_ns);
        bar->tick();
      }
      flag_base += static_cast<uint32_t>(o.warmup + o.bursts + 1);
    }
    if (bar) bar->finish();
    rank.host_barrier();
  });
  for (long long v : shared.verified) result.verified_words += v;
  result.rows = std::move(rows);
  return result;
}

}  // namespace xstage::probe
