// Host launcher of the fused EP MoE kernel: window, device communicator, index
// maps, schedule order and the cumulative counter targets of each launch; or, with
// route_on_device, the GPU planner of device_route.hpp in their place.
#include "xstage/moe/sm90_moe_fused.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "combine_drain.hpp"
#include "xstage/moe/device_route.hpp"

#include "common/check.hpp"
#include "common/config_print.hpp"
#include "common/cuda_check.hpp"
#include "xstage/comm/comm.hpp"
#include "common/device_buffer.hpp"
#include "xstage/hopper/tensor_map.hpp"

namespace xstage::moe {

namespace {
// A row-major bf16 [rows, cols] view with 128 x 64 boxes, 128-byte swizzle.
CUtensorMap map_of(const MapShape& m, const void* base) {
  hopper::TiledMapSpec s;
  s.base = base;
  s.rank = 2;
  s.dims[0] = static_cast<uint64_t>(m.cols);
  s.dims[1] = static_cast<uint64_t>(m.rows);
  s.strides_bytes[1] = static_cast<uint64_t>(m.cols) * 2;
  s.box[0] = kTileK;
  s.box[1] = kBoxRows;
  s.swizzle_128b = true;
  return hopper::make_tiled_map_bf16(s);
}

// XSTAGE_PRINT_CONFIG=1: the dispatch passes, once per problem and plan.
DispatchPlan print_dispatch_once(const Problem& p, const DispatchPlan& d, const char* from) {
  if (!common::print_config_enabled()) return d;  // no key formatting per forward
  common::print_config_once(fmt::format("moe-dispatch/{}/{}/{}/{}", describe(p), d.first, d.step, from), [&] {
    return fmt::format("xstage: moe dispatch [{}]: local experts [0, {}) by every warp before the tiles, the rest "
                       "in passes of {} while they run (plan from the {})",
                       describe(p), d.first, d.step, from);
  });
  return d;
}

// `v` into `buf` (grown when short) in the order of stream `s`, which the kernel that
// reads it runs on: no host wait. From pageable memory the copy is staged before the
// call returns, so `v` may go at once. Growing frees the old buffer: the caller has
// waited for the stream.
template <typename T>
void upload_on(DeviceBuffer<T>& buf, const std::vector<T>& v, cudaStream_t s) {
  if (buf.size() < std::max<std::size_t>(1, v.size())) buf = DeviceBuffer<T>(std::max<std::size_t>(1, v.size()));
  if (!v.empty()) XS_CHECK_CUDA(cudaMemcpyAsync(buf.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
}
}  // namespace

struct FusedMoe::Impl {
  comm::Rank* nccl;  // this rank's communicator; null: a rank of a OneGpuGroup
  int rank_id, device;
  cudaStream_t stream;
  Problem p;
  int max_rows;
  WindowLayout win;
  std::unique_ptr<comm::SymmetricWindow> window;  // with a communicator
  std::unique_ptr<comm::DeviceComm> dev;
  char* window_local = nullptr;                   // this rank's window memory
  std::array<char*, kMaxRanks> plain{};           // FusedArgs::plain (null: LSA pointers)
  std::array<char*, kMaxRanks> plain_comb{};      // FusedArgs::plain_comb (null: in the window)
  bool host_link = false;                         // a OneGpuGroup with WindowMemory::host
  bool drain_on = false;                          // set_combine_drain
  std::unique_ptr<CombineDrain> drain;            // made by the first set_combine_drain(true)
  int drain_experts_per_copy = 1;                 // set_combine_drain
  DeviceBuffer<int> return_row;                   // RankLayout::return_row (host link)
  DeviceBuffer<int> drain_stage_row;              // drain_stage_rows (host link)
  std::vector<DrainExpert> drain_plan;            // the inputs' (host link)
  std::vector<DrainGroup> drain_groups;           // drain_plan's, drain_experts_per_copy at a time
  DeviceBuffer<std::uint16_t> h, out;
  DeviceBuffer<float> weight;
  DeviceBuffer<int> expert, send_rank, send_row, expert_offset, recv_src_rank, recv_src_slot;
  DeviceBuffer<WorkItem> items;
  DeviceBuffer<int> n_items_dev{1};
  DeviceBuffer<int> all_expert, chunk_count, expert_start, plan_tables;  // route_on_device only
  DeviceBuffer<unsigned> ticket{1}, l1_done{1}, gate{1}, dispatch_expect;
  enum class Inputs { none, host, device } inputs = Inputs::none;
  MappedHostBuffer<int> nonfinite;  // route_on_device saw a non-finite logit
  bool profile = false;
  std::vector<std::array<cudaEvent_t, 7>> marks;  // per profiled call: start, topk, gather, count, scan, order, assign
  std::size_t marks_used = 0;
  FusedMaps shapes;
  CUtensorMap map_recv{}, map_h{}, map_w1{}, map_w2{};
  sync::MappedReport report;  // this rank's: a timed-out wait of its kernel
  std::vector<unsigned> dispatch_total;  // cumulative per local expert
  std::vector<unsigned> next_dispatch;   // this forward's counts
  // Host inputs: where this forward's rows come from, for a timed-out wait's message.
  std::vector<std::vector<int>> dispatch_from;  // [E/P][P] recv rows of each local expert from each source
  std::vector<int> combine_from;                // [P] this rank's (token, slot) rows computed on each rank
  int n_items = 0, max_m_blocks = 1;
  DispatchPlan dispatch;      // of the current inputs
  DeviceBuffer<unsigned long long> kernel_profile;  // set_profile(true): [blocks][roles][fields] cycles
  int profiled_launches = 0;
  unsigned epoch = 0;
  unsigned store_launches = 0;  // launches whose L2 rows went to the owners by SM stores
  const std::uint16_t *x = nullptr, *w1 = nullptr, *w2 = nullptr;
  bool have_inputs = false;

  ~Impl() {
    for (auto& m : marks)
      for (cudaEvent_t e : m) cudaEventDestroy(e);
  }

  // For a timed-out counter wait: the ranks whose rows it counts in this forward (host
  // inputs), e.g. "; this launch's rows of local expert 3: 5 from rank 0, 7 from rank 1".
  std::string sources_of(MoeSite site, int index) const {
    const bool rows = site == MoeSite::dispatch_rows, comb = site == MoeSite::combine_rows;
    if (!rows && !comb) return "";
    if (inputs != Inputs::host) return "; (routed on the device: the rows' sources are not on the host)";
    if (rows && (index < 0 || index >= static_cast<int>(dispatch_from.size()))) return "";
    const std::vector<int>& n = rows ? dispatch_from[index] : combine_from;
    std::string s = rows ? fmt::format("; this launch's rows of local expert {}:", index)
                         : fmt::format("; this launch's (token, slot) rows of this rank (each back once per {} columns):",
                                       kL2TileN);
    const char* sep = " ";
    for (int src = 0; src < static_cast<int>(n.size()); ++src) {
      if (n[src] == 0) continue;
      s += fmt::format("{}{} {} rank {}", sep, n[src], rows ? "from" : "computed on", src);
      sep = ", ";
    }
    return s;
  }

  void take_inputs(Inputs how) {
    XS_ASSERT(inputs == Inputs::none || inputs == how,
              "moe fused: this FusedMoe takes its inputs {}; construct another one to take them {}",
              inputs == Inputs::host ? "from the host (set_inputs)" : "on the device (route_on_device)",
              how == Inputs::host ? "from the host" : "on the device");
    inputs = how;
  }

  // With a communicator: the symmetric window and the device communicator (collective).
  Impl(comm::Rank& r, const Problem& prob, int rows)
      : nccl(&r), rank_id(r.rank()), device(r.device()), stream(r.stream()), p(prob), max_rows(std::max(rows, 1)),
        win(window_layout(prob, max_rows)) {
    XS_CHECK_CUDA(cudaSetDevice(device));
    window = std::make_unique<comm::SymmetricWindow>(r, win.bytes);
    dev = std::make_unique<comm::DeviceComm>(r, 1);
    window_local = static_cast<char*>(window->local());
    // EP = 1: NCCL gives a one-rank communicator no symmetric memory; the kernel takes
    // the window's memory as a plain pointer.
    if (prob.ranks == 1) plain[0] = window_local;
    init();
    r.host_barrier();
  }
  // Rank `r` of a OneGpuGroup: the group's windows, plain pointers, no communicator.
  Impl(OneGpuGroup& g, int r, cudaStream_t s)
      : nccl(nullptr), rank_id(r), stream(s), p(g.problem()), max_rows(g.max_rows()), win(g.layout()) {
    XS_CHECK_CUDA(cudaGetDevice(&device));
    for (int j = 0; j < p.ranks; ++j) {
      plain[j] = g.window(j);
      plain_comb[j] = g.comb(j);
    }
    host_link = g.memory() == WindowMemory::host;
    window_local = plain[r];
    init();
  }
  void init() {
    h = DeviceBuffer<std::uint16_t>(std::size_t(max_rows) * p.intermediate);
    out = DeviceBuffer<std::uint16_t>(std::size_t(p.tokens_per_rank) * p.hidden);
    shapes = fused_maps(p, max_rows);
    dispatch_total.assign(p.experts_per_rank(), 0);
    map_recv = map_of(shapes.recv, window_local + win.recv_off);
    map_h = map_of(shapes.h, h.get());
    // Counters start at zero on every rank before any peer may add to them (the caller
    // synchronises the ranks after this).
    fill_device(window_local, 0, kFlagsBytes);
    fill_device(gate.get(), 0, sizeof(unsigned));
    XS_CHECK_CUDA(cudaDeviceSynchronize());
  }
};

WindowLayout window_layout(const Problem& p, int max_rows) {
  auto align = [](std::size_t v) { return (v + 4095) / 4096 * 4096; };
  WindowLayout w;
  w.recv_off = kFlagsBytes;
  w.comb_off = align(kFlagsBytes + std::size_t(std::max(max_rows, 1)) * p.hidden * 2);
  w.bytes = w.comb_off + align(std::size_t(p.tokens_per_rank) * p.topk * p.hidden * 2);
  return w;
}

namespace {
void check_fused_problem(const Problem& p, int visible_gpus) {
  validate(p, visible_gpus);
  XS_ASSERT(p.ranks <= kMaxRanks, "moe fused: at most {} ranks (got {})", kMaxRanks, p.ranks);
  XS_ASSERT(p.experts_per_rank() <= kMaxLocalExperts, "moe fused: at most {} experts per rank (got {})",
            kMaxLocalExperts, p.experts_per_rank());
}
int sm_count(int device) {
  int sms = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}
}  // namespace

OneGpuGroup::OneGpuGroup(const Problem& p, int max_rows, WindowMemory memory)
    : p_(p), max_rows_(std::max(max_rows, 1)), layout_(window_layout(p, max_rows_)), memory_(memory) {
  check_fused_problem(p, -1);  // all ranks on this GPU
  for (int r = 0; r < p.ranks; ++r) {
    windows_.emplace_back(layout_.bytes);
    if (memory == WindowMemory::host) host_comb_.emplace_back(layout_.bytes - layout_.comb_off);
  }
}

FusedMoe::FusedMoe(comm::Rank& rank, const Problem& p, int max_rows) {
  check_fused_problem(p, comm::visible_gpus());
  XS_ASSERT(p.ranks == rank.nranks(), "moe fused: problem has {} ranks, communicator {}", p.ranks, rank.nranks());
  impl_ = new Impl(rank, p, max_rows);
  sms_ = blocks_ = sm_count(rank.device());  // one persistent block per SM (all resident)
}

FusedMoe::FusedMoe(OneGpuGroup& group, int rank, cudaStream_t stream) {
  XS_ASSERT(rank >= 0 && rank < group.problem().ranks, "moe fused: rank {} is not in a group of {}", rank,
            group.problem().ranks);
  impl_ = new Impl(group, rank, stream);
  sms_ = sm_count(impl_->device);
  blocks_ = std::max(1, sms_ / group.problem().ranks);  // the group's kernels run at once
}

void FusedMoe::set_blocks(int n) {
  XS_ASSERT(n >= 1 && n <= sms_, "moe fused: blocks must be in [1, {}] (at most one per SM), got {}", sms_, n);
  blocks_ = n;
}

FusedMoe::~FusedMoe() { delete impl_; }

void FusedMoe::set_weights(const std::uint16_t* w1, const std::uint16_t* w2) {
  XS_ASSERT(w1 && w2 && reinterpret_cast<uintptr_t>(w1) % 16 == 0 && reinterpret_cast<uintptr_t>(w2) % 16 == 0,
            "moe fused: weights must be non-null and 16-byte aligned");
  impl_->w1 = w1;
  impl_->w2 = w2;
  impl_->map_w1 = map_of(impl_->shapes.w1, w1);
  impl_->map_w2 = map_of(impl_->shapes.w2, w2);
}

void FusedMoe::set_inputs(const std::uint16_t* x, const Routing& routing, const Layout& layout,
                          const std::vector<WorkItem>& order) {
  Impl& m = *impl_;
  m.take_inputs(Impl::Inputs::host);
  XS_ASSERT(layout.problem.ranks == m.p.ranks && layout.problem.tokens_per_rank == m.p.tokens_per_rank &&
                layout.problem.topk == m.p.topk && layout.problem.experts == m.p.experts,
            "moe fused: layout is for {}, kernel for {}", describe(layout.problem), describe(m.p));
  const RankLayout& R = layout.ranks[m.rank_id];
  XS_ASSERT(R.rows() <= m.max_rows, "moe fused: rank {} receives {} rows but was sized for {}", m.rank_id,
            R.rows(), m.max_rows);
  // A launch still on the stream may read the buffers that a larger upload frees (and
  // its timed-out waits are reported here). The copies are stream-ordered: the kernel,
  // on the same stream, sees them.
  synchronize();
  cudaStream_t st = m.stream;
  m.x = x;
  upload_on(m.weight, routing.weight, st);
  upload_on(m.expert, routing.expert, st);
  upload_on(m.send_rank, R.send_rank, st);
  upload_on(m.send_row, R.send_row, st);
  upload_on(m.expert_offset, R.expert_offset, st);
  upload_on(m.recv_src_rank, R.recv_src_rank, st);
  upload_on(m.recv_src_slot, R.recv_src_slot, st);
  upload_on(m.items, order, st);
  if (m.host_link) {
    upload_on(m.return_row, R.return_row, st);
    upload_on(m.drain_stage_row, drain_stage_rows(R, m.p.ranks), st);
    m.drain_plan = drain_plan(R, order, m.p.ranks);
    m.drain_groups = drain_groups(m.drain_plan, m.drain_experts_per_copy);
  }
  m.n_items = static_cast<int>(order.size());
  m.dispatch = print_dispatch_once(m.p, dispatch_plan(order, m.p.experts_per_rank()), "order");
  XS_CHECK_CUDA(cudaMemcpyAsync(m.n_items_dev.get(), &m.n_items, sizeof(int), cudaMemcpyHostToDevice, st));
  m.max_m_blocks = 1;
  m.next_dispatch.assign(m.p.experts_per_rank(), 0);
  m.dispatch_from.assign(m.p.experts_per_rank(), std::vector<int>(m.p.ranks, 0));
  for (int e = 0; e < m.p.experts_per_rank(); ++e) {
    m.max_m_blocks = std::max(m.max_m_blocks, (R.count(e) + kTileM - 1) / kTileM);
    m.next_dispatch[e] = static_cast<unsigned>(R.count(e));
    for (int row = R.expert_offset[e]; row < R.expert_offset[e + 1]; ++row) ++m.dispatch_from[e][R.recv_src_rank[row]];
  }
  m.combine_from.assign(m.p.ranks, 0);
  for (int d : R.send_rank) ++m.combine_from[d];
  if (m.l1_done.size() < std::size_t(m.max_m_blocks) * m.p.experts_per_rank())
    m.l1_done = DeviceBuffer<unsigned>(std::size_t(m.max_m_blocks) * m.p.experts_per_rank());
  m.have_inputs = true;
}

void FusedMoe::route_on_device(const std::uint16_t* x, const float* logits, const ScheduleConfig& config,
                               int raster_group) {
  Impl& m = *impl_;
  const Problem& p = m.p;
  XS_ASSERT(x && logits, "moe fused: route_on_device needs device tokens and logits");
  XS_ASSERT(p.topk <= route::kTopkMax, "moe fused: routing on the device takes top-k <= {} (got {})", route::kTopkMax,
            p.topk);
  XS_ASSERT(m.max_rows >= route::max_recv_rows(p),
            "moe fused: routing on the device needs recv rows for the worst case, {} (sized for {})",
            route::max_recv_rows(p), m.max_rows);
  const OrderSpec spec = order_spec(config, p, raster_group);
  XS_CHECK_CUDA(cudaSetDevice(m.device));
  m.dispatch = print_dispatch_once(p, dispatch_plan(spec, p.experts_per_rank()), "config");
  const std::size_t tk = std::size_t(p.tokens_per_rank) * p.topk;
  const int epr = p.experts_per_rank();
  const bool first = m.inputs == Impl::Inputs::none;
  m.take_inputs(Impl::Inputs::device);
  if (first) {  // the worst-case buffers, targets from zero
    m.weight = DeviceBuffer<float>(tk);
    m.expert = DeviceBuffer<int>(tk);
    m.send_rank = DeviceBuffer<int>(tk);
    m.send_row = DeviceBuffer<int>(tk);
    m.expert_offset = DeviceBuffer<int>(epr + 1);
    m.recv_src_rank = DeviceBuffer<int>(m.max_rows);
    m.recv_src_slot = DeviceBuffer<int>(m.max_rows);
    m.items = DeviceBuffer<WorkItem>(route::item_capacity(p, m.max_rows));
    if (p.ranks > 1) m.all_expert = DeviceBuffer<int>(tk * p.ranks);
    m.chunk_count = DeviceBuffer<int>(route::chunk_count_size(p));
    m.expert_start = DeviceBuffer<int>(p.experts);
    m.plan_tables = DeviceBuffer<int>(route::plan_table_size(p));
    m.max_m_blocks = route::max_m_blocks(p);
    m.l1_done = DeviceBuffer<unsigned>(std::size_t(m.max_m_blocks) * epr);
    m.dispatch_expect = DeviceBuffer<unsigned>(epr);
    fill_device(m.dispatch_expect.get(), 0, epr * sizeof(unsigned));
    m.nonfinite = MappedHostBuffer<int>(1);
  }
  cudaStream_t st = m.stream;
  cudaEvent_t* mk = nullptr;
  if (m.profile) {
    if (m.marks_used == m.marks.size()) {
      std::array<cudaEvent_t, 7> e{};
      for (auto& ev : e) XS_CHECK_CUDA(cudaEventCreate(&ev));
      m.marks.push_back(e);
    }
    mk = m.marks[m.marks_used++].data();
    XS_CHECK_CUDA(cudaEventRecord(mk[0], st));
  }
  m.x = x;
  route::topk_softmax(logits, p.tokens_per_rank, p.experts, p.topk, m.expert.get(), m.weight.get(), m.nonfinite.device(),
                      st);
  if (mk) XS_CHECK_CUDA(cudaEventRecord(mk[1], st));
  const int* all = m.expert.get();
  if (p.ranks > 1) {
    XS_ASSERT(m.nccl, "moe fused: route_on_device with P = {} needs a communicator (its all-gather); a OneGpuGroup's "
                      "ranks take set_inputs",
              p.ranks);
    XS_CHECK_NCCL(ncclAllGather(m.expert.get(), m.all_expert.get(), tk, ncclInt32, m.nccl->comm(), st));
    all = m.all_expert.get();
  }
  if (mk) XS_CHECK_CUDA(cudaEventRecord(mk[2], st));
  route::PlanOut out;
  out.send_rank = m.send_rank.get();
  out.send_row = m.send_row.get();
  out.expert_offset = m.expert_offset.get();
  out.recv_src_rank = m.recv_src_rank.get();
  out.recv_src_slot = m.recv_src_slot.get();
  out.items = m.items.get();
  out.n_items = m.n_items_dev.get();
  out.dispatch_expect = m.dispatch_expect.get();
  route::plan(p, m.rank_id, all, spec, m.max_rows, {m.chunk_count.get(), m.expert_start.get(), m.plan_tables.get()},
              out, st, mk ? mk + 3 : nullptr);
  m.have_inputs = true;
}

void FusedMoe::profile_planner(bool on) { impl_->profile = on; }

FusedMoe::PlannerPhases FusedMoe::planner_phases() {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.device));
  XS_CHECK_CUDA(cudaStreamSynchronize(m.stream));
  PlannerPhases ph;
  const auto us = [](cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    XS_CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    return 1e3 * double(ms);
  };
  for (std::size_t i = 0; i < m.marks_used; ++i) {
    const auto& e = m.marks[i];
    ph.topk_us += us(e[0], e[1]);
    ph.gather_us += us(e[1], e[2]);
    ph.count_us += us(e[2], e[3]);
    ph.scan_us += us(e[3], e[4]);
    ph.order_us += us(e[4], e[5]);
    ph.assign_us += us(e[5], e[6]);
  }
  ph.calls = static_cast<int>(m.marks_used);
  m.marks_used = 0;
  return ph;
}

Routing FusedMoe::device_routing() const {
  const Impl& m = *impl_;
  XS_ASSERT(m.inputs == Impl::Inputs::device, "moe fused: device_routing after route_on_device only");
  XS_CHECK_CUDA(cudaSetDevice(m.device));
  XS_CHECK_CUDA(cudaStreamSynchronize(m.stream));
  const std::size_t tk = std::size_t(m.p.tokens_per_rank) * m.p.topk;
  return {m.p.tokens_per_rank, m.p.topk, m.expert.to_host(tk), m.weight.to_host(tk)};
}

void FusedMoe::set_profile(bool on) {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.device));
  if (!on) {
    m.kernel_profile = {};
    m.profiled_launches = 0;
    return;
  }
  if (m.kernel_profile.get() != nullptr) return;
  m.kernel_profile = DeviceBuffer<unsigned long long>(std::size_t(sms_) * kProfileRoles * kProfileFields);
  fill_device(m.kernel_profile.get(), 0, m.kernel_profile.size() * sizeof(unsigned long long));
  m.profiled_launches = 0;
}

FusedMoe::Profile FusedMoe::profile() {
  Impl& m = *impl_;
  XS_ASSERT(m.kernel_profile.get() != nullptr, "moe fused: profile() needs set_profile(true) first");
  synchronize();
  // The buffer holds a row per SM; the launches filled the first blocks_ rows.
  const std::vector<unsigned long long> f =
      m.kernel_profile.to_host(std::size_t(blocks_) * kProfileRoles * kProfileFields);
  fill_device(m.kernel_profile.get(), 0, m.kernel_profile.size() * sizeof(unsigned long long));
  const int launches = m.profiled_launches;
  m.profiled_launches = 0;
  if (launches == 0) return {};
  int khz = 0;
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, m.device));
  return summarize_profile(f, blocks_, launches, khz);
}

void FusedMoe::set_combine_drain(bool on, int experts_per_copy) {
  Impl& m = *impl_;
  XS_ASSERT(experts_per_copy >= 1, "moe fused: experts per drain copy must be >= 1 (got {}, rank {})",
            experts_per_copy, m.rank_id);
  XS_ASSERT(!on || m.host_link,
            "moe fused: the combine drain needs a OneGpuGroup with WindowMemory::host (rank {})", m.rank_id);
  XS_ASSERT(!on || m.inputs != Impl::Inputs::device,
            "moe fused: the combine drain plans its copies on the host; rank {} routes on the device", m.rank_id);
  if (on && !m.drain) {
    // Each rank's kernel stream and drain stream want a hardware queue of their own
    // (common::request_stream_queues); shared, the drains wait behind each other.
    static bool warned = false;
    if (2 * m.p.ranks > common::stream_queues() && !std::exchange(warned, true))
      fmt::print(stderr,
                 "moe fused: {} ranks' kernel and drain streams share {} hardware queues, so the drains "
                 "serialize; set CUDA_DEVICE_MAX_CONNECTIONS=32 before the first CUDA call\n",
                 m.p.ranks, common::stream_queues());
    XS_CHECK_CUDA(cudaSetDevice(m.device));
    synchronize();
    m.drain = std::make_unique<CombineDrain>(m.p, m.rank_id, m.max_rows);
  }
  m.drain_on = on;
  if (experts_per_copy != m.drain_experts_per_copy) {
    m.drain_experts_per_copy = experts_per_copy;
    m.drain_groups = drain_groups(m.drain_plan, experts_per_copy);
  }
}

void FusedMoe::launch() {
  launch_kernel();
  enqueue_drain();
}

void FusedMoe::launch_together(const std::vector<FusedMoe*>& ranks) {
  for (FusedMoe* f : ranks) f->launch_kernel();
  for (FusedMoe* f : ranks) f->enqueue_drain();
}

void FusedMoe::enqueue_drain() {
  Impl& m = *impl_;
  if (m.drain_on) m.drain->enqueue(m.stream, m.epoch, m.drain_plan, m.drain_groups, m.plain, m.plain_comb);
}

void FusedMoe::launch_kernel() {
  Impl& m = *impl_;
  XS_ASSERT(m.have_inputs && m.w1 && m.w2, "moe fused: set_weights and set_inputs before launch");
  XS_CHECK_CUDA(cudaSetDevice(m.device));
  ++m.epoch;
  cudaStream_t st = m.stream;
  if (m.inputs == Impl::Inputs::host) {  // route_on_device has added this forward's counts on the device
    for (int e = 0; e < m.p.experts_per_rank(); ++e) m.dispatch_total[e] += m.next_dispatch[e];
    // Stream-ordered: the previous launch may still be reading the old targets.
    if (m.dispatch_expect.size() < m.dispatch_total.size())
      m.dispatch_expect = DeviceBuffer<unsigned>(m.dispatch_total.size());
    XS_CHECK_CUDA(cudaMemcpyAsync(m.dispatch_expect.get(), m.dispatch_total.data(),
                                  m.dispatch_total.size() * sizeof(unsigned), cudaMemcpyHostToDevice, st));
  }
  XS_CHECK_CUDA(cudaMemsetAsync(m.ticket.get(), 0, sizeof(unsigned), st));
  XS_CHECK_CUDA(cudaMemsetAsync(m.l1_done.get(), 0, m.l1_done.size() * sizeof(unsigned), st));

  FusedArgs a{};
  if (m.window) a.window = m.window->window();
  if (m.dev) a.dev = m.dev->get();
  for (int j = 0; j < kMaxRanks; ++j) {
    a.plain[j] = m.plain[j];
    a.plain_comb[j] = m.plain_comb[j];
  }
  a.recv_off = m.win.recv_off;
  a.comb_off = m.win.comb_off;
  a.rank = m.rank_id;
  a.ranks = m.p.ranks;
  a.tokens = m.p.tokens_per_rank;
  a.topk = m.p.topk;
  a.hidden = m.p.hidden;
  a.inter = m.p.intermediate;
  a.experts_local = m.p.experts_per_rank();
  a.l1_n_blocks = m.p.intermediate / kL1TileN;
  a.l2_n_blocks = m.p.hidden / kL2TileN;
  a.map_recv = m.map_recv;
  a.map_h = m.map_h;
  a.map_w1 = m.map_w1;
  a.map_w2 = m.map_w2;
  a.x = m.x;
  a.w1 = m.w1;
  a.w2 = m.w2;
  a.h = m.h.get();
  a.out = m.out.get();
  a.weight = m.weight.get();
  a.expert = m.expert.get();
  a.send_rank = m.send_rank.get();
  a.send_row = m.send_row.get();
  a.expert_offset = m.expert_offset.get();
  a.recv_src_rank = m.recv_src_rank.get();
  a.recv_src_slot = m.recv_src_slot.get();
  a.items = m.items.get();
  a.n_items = m.n_items_dev.get();
  a.ticket = m.ticket.get();
  a.l1_done = m.l1_done.get();
  a.max_m_blocks = m.max_m_blocks;
  a.gate = m.gate.get();
  a.dispatch_expect = m.dispatch_expect.get();
  // Every (token, slot) of this rank comes back once per L2 n-block, in every launch
  // without the combine drain (whose launches count on the drain flags instead).
  if (!m.drain_on) ++m.store_launches;
  a.combine_expect =
      m.store_launches * static_cast<unsigned>(m.p.tokens_per_rank * m.p.topk * (m.p.hidden / kL2TileN));
  a.epoch = m.epoch;
  a.dispatch_first = m.dispatch.first;
  a.dispatch_step = m.dispatch.step;
  a.profile = m.kernel_profile.get();
  if (a.profile != nullptr) ++m.profiled_launches;
  a.wait = {sync::wait_budget_ns(), m.rank_id, static_cast<int>(sync::Kernel::moe), m.report.device()};
  if (m.drain_on) {
    a.drain_stage = m.drain->stage();
    a.l2_done = m.drain->l2_done();
    a.return_row = m.return_row.get();
    a.drain_stage_row = m.drain_stage_row.get();
  }
  launch_fused(a, blocks_, st);
}

void FusedMoe::synchronize() {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.device));
  const cudaError_t err = cudaStreamSynchronize(m.stream);
  if (err == cudaSuccess) {
    if (m.nonfinite.host() && *static_cast<volatile int*>(m.nonfinite.host()) != 0) {
      *m.nonfinite.host() = 0;
      XS_FAIL("moe fused: rank {}'s router logits hold a non-finite value (NaN or inf); the forwards since the last "
              "check ranked it as +-FLT_MAX",
              m.rank_id);
    }
    return;
  }
  if (m.report.raised()) {  // flag 1, or 2 when the fault came before the final flag store landed
    const sync::WaitReport r = m.report.read();
    const std::string line = m.report.take(&kMoeSites);
    XS_FAIL("{}{}; CUDA: {}", line, m.sources_of(static_cast<MoeSite>(r.site), r.index), cudaGetErrorString(err));
  }
  XS_FAIL("moe fused kernel failed on rank {}: {}", m.rank_id, cudaGetErrorString(err));
}

std::uint16_t* FusedMoe::out() const { return impl_->out.get(); }

}  // namespace xstage::moe
