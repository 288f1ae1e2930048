// Host driver of the X-Stage probe: one thread per GPU (comm::run_ranks), all ranks
// step through the same configuration list in lock step (std::barrier).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/progress.hpp"
#include "common/stats.hpp"
#include "xstage/bench/event_timer.hpp"
#include "xstage/comm/comm.hpp"
#include "xstage/probe/probe.hpp"
#include "xstage/probe/sm90_probe.hpp"

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

// Where burst b of one SM starts in its region: the place it rotates to (fresh
// addresses) or the region's start. 128-byte places, so TMA chunks stay aligned.
struct Places {
  std::size_t bytes = 0;
  int count = 1;
};
Places places_of(const ProbeConfig& c, const ProbeOptions& o, std::size_t region) {
  const std::size_t stride = (c.burst_bytes + 127) / 128 * 128;
  if (!o.fresh_addresses) return {stride, 1};
  return {stride, static_cast<int>(std::min<std::size_t>(region / stride, 1 << 20))};
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
  const Places pl = places_of(c, o, region);
  const std::size_t last_off = static_cast<std::size_t>(last % static_cast<uint32_t>(pl.count)) * pl.bytes;
  long long checked = 0;
  std::vector<uint32_t> host(c.burst_bytes / 4);
  for (int sm : {0, c.sms - 1}) {
    // Default: the payload is device memory, or mapped host memory (pattern host).
    XS_CHECK_CUDA(cudaMemcpy(host.data(), static_cast<char*>(payload) + static_cast<std::size_t>(sm) * region + last_off,
                             c.burst_bytes, cudaMemcpyDefault));
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
      if (c.mode == "visible") {  // host rows: no observer, the fence's return only
        drain.push_back(static_cast<double>(r.gt_fenced) - static_cast<double>(r.gt_start));
        if (c.pattern == "host") continue;
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
  }
  if (!drain.empty()) row.drain_ns_med = common::median(drain);
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


bool uses_host(const ProbeOptions& o) {
  return std::any_of(o.configs.begin(), o.configs.end(), [](const ProbeConfig& c) { return c.pattern == "host"; });
}

// The per-SM region of the payload: the largest burst, 128-byte aligned; and the most SMs.
struct Extent {
  std::size_t region = 0;
  int max_sms = 0;
};

Extent extent_of(const ProbeOptions& o) {
  std::size_t max_burst = 0;
  Extent e;
  for (const auto& c : o.configs) {
    max_burst = std::max(max_burst, c.burst_bytes);
    e.max_sms = std::max(e.max_sms, c.sms);
  }
  e.region = (max_burst + 127) / 128 * 128;
  // Fresh addresses: each SM's share of the whole buffer, for as many places as fit.
  if (o.fresh_addresses && e.max_sms > 0) e.region = std::max(e.region, o.buffer_bytes / e.max_sms / 128 * 128);
  XS_ASSERT(e.region * static_cast<std::size_t>(e.max_sms) <= o.buffer_bytes,
            "largest burst ({} B) x most SMs ({}) exceeds the {}-byte buffer (raise --buffer)", max_burst, e.max_sms,
            o.buffer_bytes);
  return e;
}

// One rank's part of the probe: its window and device records, and the steps that
// every rank takes together (each is collective: all ranks call it in the same order).
class RankProbe {
 public:
  RankProbe(comm::Rank& rank, const ProbeOptions& o, const Extent& e, Shared& shared, ProbeResult& result)
      : rank_(rank), o_(o), e_(e), shared_(shared), result_(result), me_(rank.rank()), st_(rank.stream()),
        win_(rank, kPayloadOffset + o.buffer_bytes), budget_{comm::wait_timeout_ns(), me_},
        bursts_(static_cast<std::size_t>(e.max_sms) * o.bursts), sms_(e.max_sms),
        seen_(static_cast<std::size_t>(e.max_sms) * o.bursts), ping_(2 * kPingRounds), sink_(kBlockThreads) {
    shared_.payload[me_] = static_cast<char*>(win_.local()) + kPayloadOffset;
    if (me_ == 0 && uses_host(o)) host_ = MappedHostBuffer<char>(kPayloadOffset + o.buffer_bytes);
    rank_.host_barrier();  // every window registered before any peer access
  }

  // Clock offsets: rank 0 pings each receiver in turn (NTP-style, fastest round). The
  // GPUs' timers drift apart by microseconds over a sweep, so this runs again before
  // every visible-mode configuration.
  void calibrate_clocks() {
    for (int r = 1; r < o_.gpus; ++r) {
      ping_base_ += kPingRounds + 1;
      PingArgs pa{win_.window(), me_ == 0 ? r : 0, kPingRounds, ping_base_, ping_.get(), budget_};
      if (me_ == 0) launch_ping_sender(pa, st_);
      if (me_ == r) launch_ping_echo(pa, st_);
      synchronize(st_);  // names a timed-out wait
      if (me_ == 0 || me_ == r) shared_.seen[me_] = ping_.to_host(2 * kPingRounds);
      shared_.sync.arrive_and_wait();
      if (me_ == 0) fastest_round(r);
      shared_.sync.arrive_and_wait();
    }
  }

  // Copy-engine reference: cudaMemcpyPeer rank 0 -> rank 1, the median of 10 copies
  // after 3 warm-up ones.
  void copy_engine() {
    if (me_ <= 1) XS_CHECK_CUDA(cudaMalloc(&shared_.copy_buf[me_], kCopyBytes));
    shared_.sync.arrive_and_wait();
    if (me_ == 0) {
      bench::EventTimer timer(st_, "copy engine");
      std::vector<double> ms;
      for (int i = 0; i < 13; ++i) {
        const double t = timer(
            [&] { XS_CHECK_CUDA(cudaMemcpyPeerAsync(shared_.copy_buf[1], 1, shared_.copy_buf[0], 0, kCopyBytes, st_)); },
            1);
        if (i >= 3) ms.push_back(t);
      }
      result_.copy_engine_GBps = static_cast<double>(kCopyBytes) / (common::median(ms) * 1e6);
    }
    shared_.sync.arrive_and_wait();
    if (me_ <= 1) XS_CHECK_CUDA(cudaFree(shared_.copy_buf[me_]));
  }

  // Device-to-host reference for the host link: cudaMemcpyAsync of the payload buffer's
  // size from device memory into the mapped host buffer, the median of 10 after 3.
  void copy_engine_d2h() {
    if (me_ != 0 || host_.size() == 0) return;
    DeviceBuffer<char> src(o_.buffer_bytes);
    fill_device(src.get(), 1, o_.buffer_bytes);
    bench::EventTimer timer(st_, "copy engine d2h");
    std::vector<double> ms;
    for (int i = 0; i < 13; ++i) {
      const double t = timer(
          [&] {
            XS_CHECK_CUDA(cudaMemcpyAsync(host_.host() + kPayloadOffset, src.get(), o_.buffer_bytes,
                                          cudaMemcpyDeviceToHost, st_));
          },
          1);
      if (i >= 3) ms.push_back(t);
    }
    result_.copy_engine_d2h_GBps = static_cast<double>(o_.buffer_bytes) / (common::median(ms) * 1e6);
  }

  // Configuration i: rank 0 sends, the observers watch (visible mode), every rank checks
  // its payload; rank 0 then summarizes the records into `row`.
  void run_config(std::size_t i, SweepRow& row) {
    const ProbeConfig& c = o_.configs[i];
    const auto dst = destinations(c.pattern, o_.gpus);
    const uint32_t epoch = static_cast<uint32_t>(i + 1);
    const bool visible = c.mode == "visible";
    if (visible) calibrate_clocks();
    shared_.sync.arrive_and_wait();
    if (visible && me_ != 0 && std::find(dst.begin(), dst.end(), me_) != dst.end()) {
      ObserverArgs oa{win_.window(), c.sms, o_.warmup, o_.bursts, flag_base_, seen_.get(), budget_};
      launch_observer(oa, st_);
    }
    if (me_ == 0) send(c, dst, epoch, visible);
    synchronize(st_);  // names a timed-out wait
    shared_.sync.arrive_and_wait();  // all kernels of this config are done
    if (visible && me_ != 0) shared_.seen[me_] = seen_.to_host(static_cast<std::size_t>(c.sms) * o_.bursts);
    verify(c, epoch, c.pattern == "host" ? host_.host() + kPayloadOffset : shared_.payload[me_]);
    if (me_ == 0) row = summarize(c);
    flag_base_ += static_cast<uint32_t>(o_.warmup + o_.bursts + 1);
  }

 private:
  void fastest_round(int r) {
    double best_rtt = std::numeric_limits<double>::max(), offset = 0;
    for (int i = 0; i < kPingRounds; ++i) {
      const double a = static_cast<double>(shared_.seen[0][2 * i]);
      const double c = static_cast<double>(shared_.seen[0][2 * i + 1]);
      const double b = static_cast<double>(shared_.seen[r][i]);
      if (c - a < best_rtt) {
        best_rtt = c - a;
        offset = b - (a + c) / 2;
      }
    }
    result_.clock_offset_ns[r] = offset;
    result_.ping_rtt_ns[r] = best_rtt;
  }

  void send(const ProbeConfig& c, const std::vector<int>& dst, uint32_t epoch, bool visible) {
    SenderArgs sa{};
    sa.window = win_.window();
    if (c.pattern == "host") {  // mapped host memory: a plain pointer on any rank count
      sa.self_payload = host_.device() + kPayloadOffset;
      sa.self_flags = reinterpret_cast<uint32_t*>(host_.device() + kFlagOffset);
    } else if (o_.gpus == 1) {  // no LSA pointers on a one-rank communicator (SenderArgs)
      sa.self_payload = static_cast<char*>(win_.local()) + kPayloadOffset;
      sa.self_flags = reinterpret_cast<uint32_t*>(static_cast<char*>(win_.local()) + kFlagOffset);
    }
    sa.n_dst = static_cast<int>(dst.size());
    for (int d = 0; d < sa.n_dst; ++d) sa.dst_rank[d] = dst[d];
    sa.store = store_kind(c.store);
    sa.burst_bytes = static_cast<int>(c.burst_bytes);
    sa.region_bytes = e_.region;
    const Places pl = places_of(c, o_, e_.region);
    sa.place_bytes = pl.bytes;
    sa.places = pl.count;
    sa.warmup = o_.warmup;
    sa.bursts = o_.bursts;
    sa.gap_ns = static_cast<long long>(c.gap_ns);
    sa.visible = visible ? 1 : 0;
    sa.flag_base = flag_base_;
    sa.epoch = epoch;
    sa.bursts_out = bursts_.get();
    sa.sms_out = sms_.get();
    sa.sink = sink_.get();
    sa.wait = budget_;
    launch_sender(sa, c.sms, st_);
  }

  // Every rank checks its payload bitwise; rank 0 fails with the first mismatch.
  void verify(const ProbeConfig& c, uint32_t epoch, void* payload) {
    std::string err;
    shared_.verified[me_] += verify_payload(c, o_, me_, payload, e_.region, epoch, err);
    if (!err.empty()) {
      std::lock_guard lock(shared_.mu);
      if (shared_.verify_error.empty()) shared_.verify_error = err;
    }
    shared_.sync.arrive_and_wait();
    if (me_ == 0) XS_ASSERT(shared_.verify_error.empty(), "{}", shared_.verify_error);
  }

  SweepRow summarize(const ProbeConfig& c) {
    const auto bursts = bursts_.to_host(static_cast<std::size_t>(c.sms) * o_.bursts);
    const auto sms = sms_.to_host(c.sms);
    std::vector<int> ids;
    for (const auto& s : sms) ids.push_back(s.smid);
    std::sort(ids.begin(), ids.end());
    XS_ASSERT(std::adjacent_find(ids.begin(), ids.end()) == ids.end(),
              "two probe blocks shared an SM ({} SMs requested)", c.sms);
    return summarize_config(c, o_, bursts, sms, shared_, result_.clock_offset_ns);
  }

  comm::Rank& rank_;
  const ProbeOptions& o_;
  Extent e_;
  Shared& shared_;
  ProbeResult& result_;
  int me_;
  cudaStream_t st_;
  comm::SymmetricWindow win_;
  sync::WaitContext budget_;
  DeviceBuffer<BurstRecord> bursts_;
  DeviceBuffer<SmRecord> sms_;
  DeviceBuffer<unsigned long long> seen_, ping_;
  DeviceBuffer<float> sink_;
  MappedHostBuffer<char> host_;  // rank 0, with a host pattern: flags and payload (layout of the window)
  uint32_t ping_base_ = 0, flag_base_ = 1u << 20;
};

}  // namespace

ProbeResult run_probe(const ProbeOptions& o) {
  const int present = comm::visible_gpus();
  XS_ASSERT(present > 0, "no CUDA GPU is visible: the probe needs at least one");
  cudaDeviceProp prop{};
  XS_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  validate(o, present, prop.multiProcessorCount);
  const Extent extent = extent_of(o);

  ProbeResult result;
  result.card = prop.name;
  result.gpus = o.gpus;
  result.sm_count = prop.multiProcessorCount;
  result.fresh_addresses = o.fresh_addresses;
  result.clock_offset_ns.assign(o.gpus, 0.0);
  result.ping_rtt_ns.assign(o.gpus, 0.0);
  Shared shared(o.gpus);
  shared.verified.assign(o.gpus, 0);
  result.rows.resize(o.configs.size());
  comm::run_ranks(o.gpus, comm::Launch::threads, [&](comm::Rank& rank) {
    RankProbe probe(rank, o, extent, shared, result);
    probe.calibrate_clocks();
    if (o.copy_engine && o.gpus >= 2) probe.copy_engine();
    if (o.copy_engine) probe.copy_engine_d2h();
    std::unique_ptr<common::ProgressBar> bar;
    if (rank.rank() == 0) bar = std::make_unique<common::ProgressBar>("probe", o.configs.size(), o.progress);
    for (std::size_t i = 0; i < o.configs.size(); ++i) {
      probe.run_config(i, result.rows[i]);
      if (bar) bar->tick();
    }
    if (bar) bar->finish();
    rank.host_barrier();
  });
  for (long long v : shared.verified) result.verified_words += v;
  return result;
}

}  // namespace xstage::probe
