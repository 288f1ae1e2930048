// The Ulysses layer on one rank: buffers, the symmetric window of the fused
// path, the exchange plans run with cudaMemcpy2DAsync + grouped ncclSend/Recv,
// and the three post-attention paths (serial, coarse, fused).
#include <array>

#include "common/check.hpp"
#include "xstage/ulysses/qkv_fused.hpp"
#include "xstage/ulysses/ulysses_fused.hpp"
#include "xstage/attention/attention_cuda.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "xstage/ulysses/ulysses_cuda.hpp"
#include "xstage/ulysses/qkv.hpp"

namespace xstage::ulysses {

const char* to_string(Completion c) {
  return c == Completion::sender_visible ? "sender_visible" : "receiver_complete";
}

namespace {
constexpr std::size_t kCounterBytes = 4096;  // window head: one counter per source rank, then the output
// The QKV window's head: completion counters per source at [0, kMaxRanks), ready
// flags per source at [kQkvReady, kQkvReady + kMaxRanks) (uint32 indices); then
// the gathered q, k, v [B, S, H/P, D] the attention reads.
constexpr int kQkvReady = 16;
using Ptrs = std::array<std::uint16_t*, 5>;  // indexed by Buf

void copy_2d(const Copy2D& c, const Ptrs& p, cudaStream_t st) {
  XS_ASSERT(p[size_t(c.src)] && p[size_t(c.dst)], "ulysses: plan copies {} -> {}, which this step has not",
            to_string(c.src), to_string(c.dst));
  XS_CHECK_CUDA(cudaMemcpy2DAsync(p[size_t(c.dst)] + c.dst_off, c.dst_pitch * 2, p[size_t(c.src)] + c.src_off,
                                  c.src_pitch * 2, c.width * 2, c.height, cudaMemcpyDeviceToDevice, st));
}
}  // namespace

struct Layer::Impl {
  comm::Rank& rank;
  Problem p;
  RankLayout me;
  ExchangePlan pre, post;
  DeviceBuffer<std::uint16_t> attn_out, send, recv, serial_out, coarse_out;
  comm::SymmetricWindow window;
  comm::SymmetricWindow qkv_window;  // head counters, then attn_q, attn_k, attn_v
  std::uint16_t *attn_q = nullptr, *attn_k = nullptr, *attn_v = nullptr;
  // The fused QKV projection (pre_attention_qkv), when the problem suits it.
  bool qkv_ok = false;
  DeviceBuffer<int> qkv_order;
  QkvArgs qkv_args{};  // everything but the maps, inputs and epoch
  uint32_t qkv_epoch = 0;
  SourceCounts qkv_expected;
  int qkv_grid = 0;
  comm::DeviceComm dev;
  FusedTargets targets;
  attention::FwdConfig cfg, fused_cfg;
  FusedSchedule schedule;
  cudaStream_t side = nullptr;
  std::vector<cudaEvent_t> chunk_done;
  cudaEvent_t side_done = nullptr;
  const std::uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
  std::unique_ptr<DeviceBuffer<std::uint16_t>> loop_out;  // fused_loopback scratch, made on first use
  std::unique_ptr<DeviceBuffer<uint32_t>> loop_counter;
  // Receiver-complete: what each source has signalled so far (counters only grow),
  // from every source's own launch (grid, consumer warpgroups), gathered once.
  SourceCounts expected;
  std::array<int, kMaxRanks> source_grid{}, source_wgs{};

  Impl(comm::Rank& r, const Problem& prob, const burstgap::ModelParams& params)
      : rank(r),
        p(prob),
        me(rank_layout(prob, r.rank())),
        pre(pre_attention_plan(prob, r.rank())),
        post(post_attention_plan(prob, r.rank())),
        attn_out(attn_elems()),
        send(std::max<int64_t>({pre.send_elems, post.send_elems, 1})),
        recv(std::max<int64_t>({pre.recv_elems, post.recv_elems, 1})),
        serial_out(out_elems()),
        coarse_out(out_elems()),
        window(r, kCounterBytes + out_elems() * 2),
        qkv_window(r, kCounterBytes + 3 * attn_elems() * 2),
        dev(r, 1) {
    auto* qkv_base = reinterpret_cast<std::uint16_t*>(static_cast<char*>(qkv_window.local()) + kCounterBytes);
    attn_q = qkv_base;
    attn_k = qkv_base + attn_elems();
    attn_v = qkv_base + 2 * attn_elems();
    XS_CHECK_CUDA(cudaSetDevice(r.device()));
    int sms = 0;
    XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, r.device()));
    cfg = attention::choose_config(attention::validate(args(nullptr)), sms);
    schedule = choose_schedule(p, r.rank(), cfg.grid, params);
    fused_cfg = cfg;
    fused_cfg.tiles = schedule.tiles;
    std::array<void*, kMaxRanks> counters{}, outs{};
    lsa_pointers(window.window(), 0, p.ranks, counters.data());
    lsa_pointers(window.window(), kCounterBytes, p.ranks, outs.data());
    for (int j = 0; j < p.ranks; ++j) {
      targets.out[j] = outs[j];
      targets.counter[j] = static_cast<uint32_t*>(counters[j]) + r.rank();  // owner j's counter for me
    }
    targets.geo = fused_geometry(p, r.rank());
    try {
      validate_qkv(p);
      qkv_ok = true;
    } catch (const common::Error&) {
      qkv_ok = false;  // pre_attention_qkv() says why
    }
    if (qkv_ok) setup_qkv(params, sms);
    XS_CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    chunk_done.resize(p.ranks);
    for (auto& e : chunk_done) XS_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    XS_CHECK_CUDA(cudaEventCreateWithFlags(&side_done, cudaEventDisableTiming));
    // Every source's launch shape, for what its per-CTA signal adds (fused_signals_per_forward).
    {
      DeviceBuffer<int> mine(2), all(2 * static_cast<std::size_t>(p.ranks));
      const int shape[2] = {cfg.grid, cfg.consumer_wgs};
      copy_to_device(mine.get(), shape, sizeof shape);
      XS_CHECK_NCCL(ncclAllGather(mine.get(), all.get(), 2, ncclInt32, r.comm(), r.stream()));
      XS_CHECK_CUDA(cudaStreamSynchronize(r.stream()));  // a non-blocking stream: to_host would not wait for it
      const std::vector<int> h = all.to_host(all.size());
      for (int j = 0; j < p.ranks; ++j) {
        source_grid[j] = h[2 * j];
        source_wgs[j] = h[2 * j + 1];
      }
    }
    // Counters start at zero everywhere before any peer may add to them.
    fill_device(window.local(), 0, kCounterBytes);
    fill_device(qkv_window.local(), 0, kCounterBytes);
    XS_CHECK_CUDA(cudaDeviceSynchronize());
    r.host_barrier();
  }
  ~Impl() {
    for (auto& e : chunk_done) cudaEventDestroy(e);
    if (side_done) cudaEventDestroy(side_done);
    if (side) cudaStreamDestroy(side);
  }

  // Owners' pointers, the advisor's tile order and the launch shape of the fused QKV projection.
  void setup_qkv(const burstgap::ModelParams& params, int sms) {
    qkv_grid = std::min(sms, qkv_tiles(p));
    const QkvSchedule sched = choose_qkv_schedule(p, rank.rank(), qkv_grid, params);  // printed with XSTAGE_PRINT_CONFIG=1
    qkv_order = DeviceBuffer<int>(sched.order.size());
    copy_to_device(qkv_order.get(), sched.order.data(), sched.order.size() * sizeof(int));
    std::array<void*, kMaxRanks> heads{}, bufs{};
    lsa_pointers(qkv_window.window(), 0, p.ranks, heads.data());
    lsa_pointers(qkv_window.window(), kCounterBytes, p.ranks, bufs.data());
    qkv_args = qkv_shape_args(p, rank.rank());
    QkvArgs& a = qkv_args;
    a.order = qkv_order.get();
    a.n_entries = static_cast<int>(sched.order.size());
    for (int j = 0; j < p.ranks; ++j) {
      auto* base = static_cast<std::uint16_t*>(bufs[j]);
      for (int part = 0; part < 3; ++part) a.dst[part][j] = base + part * attn_elems();
      a.done[j] = static_cast<uint32_t*>(heads[j]) + rank.rank();               // owner j's counter for me
      a.ready_out[j] = static_cast<uint32_t*>(heads[j]) + kQkvReady + rank.rank();
    }
    a.ready_in = static_cast<const uint32_t*>(qkv_window.local()) + kQkvReady;
  }

  std::size_t attn_elems() const { return p.batch * p.seq * p.heads_per_rank() * p.head_dim; }
  std::size_t out_elems() const { return p.batch * p.rows_per_rank() * p.heads * p.head_dim; }
  std::uint16_t* fused_out() const {
    return reinterpret_cast<std::uint16_t*>(static_cast<char*>(window.local()) + kCounterBytes);
  }

  // Attention over the gathered heads: rows [row0, row0 + rows) of the queries
  // against keys [0, kv), into attn_out at the same rows; kv stops at the padding
  // (Problem::valid): the K and V maps end there, so TMA never reads a padded row.
  attention::FwdArgs args(std::uint16_t* o, int64_t row0 = 0, int64_t rows = -1) const {
    const int64_t S = p.seq, Hp = p.heads_per_rank(), D = p.head_dim;
    if (rows < 0) rows = S;
    auto view = [&](std::uint16_t* b, int64_t r0, int64_t n) {
      attention::Tensor4 t = attention::Tensor4::bshd(b + r0 * Hp * D, p.batch, n, Hp, D);
      t.stride_b = S * Hp * D;
      return t;
    };
    attention::FwdArgs a;
    const int64_t kv = p.causal ? row0 + rows : p.keys();  // bottom-right aligned causal = rows see keys <= their index
    a.q = view(attn_q, row0, rows);
    a.k = view(attn_k, 0, kv);
    a.v = view(attn_v, 0, kv);
    a.o = view(attn_out.get(), row0, rows);
    if (o) a.o.data = o + row0 * Hp * D;
    a.causal = p.causal;
    return a;
  }

  void run_plan(const ExchangePlan& plan, const Ptrs& ptrs, cudaStream_t st, bool transfers = true) {
    for (const auto& c : plan.before) copy_2d(c, ptrs, st);
    if (transfers && !plan.transfers.empty()) {
      XS_CHECK_NCCL(ncclGroupStart());
      for (const Transfer& t : plan.transfers) {
        XS_CHECK_NCCL(ncclSend(ptrs[size_t(t.send_buf)] + t.send_off, t.count, ncclBfloat16, t.peer, rank.comm(), st));
        XS_CHECK_NCCL(ncclRecv(ptrs[size_t(t.recv_buf)] + t.recv_off, t.count, ncclBfloat16, t.peer, rank.comm(), st));
      }
      XS_CHECK_NCCL(ncclGroupEnd());
    }
    for (const auto& c : plan.after) copy_2d(c, ptrs, st);
  }
};

Layer::Layer(comm::Rank& rank, const Problem& p, const burstgap::ModelParams& params) {
  validate(p, comm::visible_gpus());
  // One rank has nothing to exchange, and its one-member window has no peer view to build.
  XS_ASSERT(p.ranks >= 2, "ulysses: P = 1 needs no Ulysses layer; run the attention itself (attention::flash_fwd)");
  XS_ASSERT(p.ranks == rank.nranks(), "ulysses: the problem has P = {} ranks, the communicator {}", p.ranks,
            rank.nranks());
  impl_ = std::make_unique<Impl>(rank, p, params);
}

Layer::~Layer() = default;

const Problem& Layer::problem() const { return impl_->p; }

void Layer::set_inputs(const void* q, const void* k, const void* v) {
  XS_ASSERT(q && k && v, "ulysses: set_inputs needs Q, K and V");
  impl_->q = static_cast<const std::uint16_t*>(q);
  impl_->k = static_cast<const std::uint16_t*>(k);
  impl_->v = static_cast<const std::uint16_t*>(v);
}

void Layer::pre_attention() {
  Impl& m = *impl_;
  XS_ASSERT(m.q, "ulysses: set_inputs before pre_attention");
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  const std::pair<const std::uint16_t*, std::uint16_t*> tensors[] = {
      {m.q, m.attn_q}, {m.k, m.attn_k}, {m.v, m.attn_v}};
  for (const auto& [in, out] : tensors)
    m.run_plan(m.pre, {const_cast<std::uint16_t*>(in), m.send.get(), m.recv.get(), out, nullptr}, m.rank.stream());
}

bool Layer::fused_qkv_supported() const { return impl_->qkv_ok; }

const std::uint16_t* Layer::gathered(int part) const {
  XS_ASSERT(part >= 0 && part < 3, "ulysses: gathered part {} is not q (0), k (1) or v (2)", part);
  return part == 0 ? impl_->attn_q : part == 1 ? impl_->attn_k : impl_->attn_v;
}

void Layer::pre_attention_qkv(const QkvInputs& in) {
  Impl& m = *impl_;
  if (!m.qkv_ok) validate_qkv(m.p);  // throws the reason
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  QkvArgs a = m.qkv_args;
  qkv_bind_inputs(a, in);
  a.epoch = ++m.qkv_epoch;
  launch_qkv_fused(a, m.qkv_grid, m.rank.stream());
  // The attention reads all of q, k, v: wait for every source's heads.
  for (int src = 0; src < m.p.ranks; ++src) m.qkv_expected.v[src] += qkv_signals_per_source(m.p);
  launch_wait_sources(static_cast<const uint32_t*>(m.qkv_window.local()), m.p.ranks, m.qkv_expected,
                      {comm::wait_timeout_ns(), m.rank.rank()}, m.rank.stream());
}

void Layer::attention_only() {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  attention::flash_fwd(m.args(nullptr), m.rank.stream());
}

void Layer::post_attention() {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  m.run_plan(m.post, {nullptr, m.send.get(), m.recv.get(), m.attn_out.get(), m.serial_out.get()}, m.rank.stream());
}

void Layer::serial() {
  attention_only();
  post_attention();
}

void Layer::coarse() {
  Impl& m = *impl_;
  XS_ASSERT(m.p.batch == 1, "ulysses: the coarse-overlap baseline takes B = 1 only (got B = {})", m.p.batch);
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  const int P = m.p.ranks, r = m.rank.rank();
  const int64_t R = m.p.rows_per_rank(), chunk = R * m.p.heads_per_rank() * m.p.head_dim;
  cudaStream_t st = m.rank.stream();
  XS_CHECK_CUDA(cudaEventRecord(m.side_done, st));  // the side stream starts after what came before
  XS_CHECK_CUDA(cudaStreamWaitEvent(m.side, m.side_done));
  for (int k = 0; k < P; ++k) {
    const int owner = coarse_chunk_owner(m.p, r, k);
    attention::flash_fwd(m.args(nullptr, owner * R, R), st);
    if (owner == r) continue;  // the last chunk: local, copied below
    // Step k: every rank sends its chunk to rank + 1 + k and receives from rank - 1 - k.
    XS_CHECK_CUDA(cudaEventRecord(m.chunk_done[k], st));
    XS_CHECK_CUDA(cudaStreamWaitEvent(m.side, m.chunk_done[k]));
    const int src = ((r - 1 - k) % P + P) % P;
    XS_CHECK_NCCL(ncclGroupStart());
    XS_CHECK_NCCL(ncclSend(m.attn_out.get() + owner * chunk, chunk, ncclBfloat16, owner, m.rank.comm(), m.side));
    XS_CHECK_NCCL(ncclRecv(m.recv.get() + src * chunk, chunk, ncclBfloat16, src, m.rank.comm(), m.side));
    XS_CHECK_NCCL(ncclGroupEnd());
  }
  XS_CHECK_CUDA(cudaEventRecord(m.side_done, m.side));
  XS_CHECK_CUDA(cudaStreamWaitEvent(st, m.side_done));
  // The serial plan's local copy and unpacks (its transfers are the steps above).
  m.run_plan(m.post, {nullptr, m.send.get(), m.recv.get(), m.attn_out.get(), m.coarse_out.get()}, st, false);
}

void Layer::fused(Completion c, FusedSignal signal) {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  FusedTargets t = m.targets;
  t.signal = signal == FusedSignal::automatic ? default_signal(m.p) : signal;
  launch_fused_attention(m.args(nullptr), m.fused_cfg, t, m.rank.stream());
  // Every rank launches the same sequence of modes, so each source's counter here
  // grows by what that source's launch signals (fused_signals_per_forward), also
  // when only sender-visible launches came before.
  for (int src = 0; src < m.p.ranks; ++src)
    m.expected.v[src] += fused_signals_per_forward(m.p, t.signal, m.source_grid[src], m.source_wgs[src]);
  if (c == Completion::receiver_complete)
    launch_wait_sources(static_cast<const uint32_t*>(m.window.local()), m.p.ranks, m.expected,
                        {comm::wait_timeout_ns(), m.rank.rank()}, m.rank.stream());
}

void Layer::attention_fused_order() {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  attention::flash_fwd_with(m.args(nullptr), m.fused_cfg, m.rank.stream());
}

void Layer::fused_loopback() {
  Impl& m = *impl_;
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  if (!m.loop_out) {
    m.loop_out = std::make_unique<DeviceBuffer<std::uint16_t>>(m.out_elems());
    m.loop_counter = std::make_unique<DeviceBuffer<uint32_t>>(kMaxRanks);
  }
  FusedTargets t = m.targets;
  for (int j = 0; j < m.p.ranks; ++j) {
    t.out[j] = m.loop_out->get();
    t.counter[j] = m.loop_counter->get() + j;
  }
  launch_fused_attention(m.args(nullptr), m.fused_cfg, t, m.rank.stream());
}

const std::uint16_t* Layer::serial_out() const { return impl_->serial_out.get(); }
const std::uint16_t* Layer::coarse_out() const { return impl_->coarse_out.get(); }
const std::uint16_t* Layer::fused_out() const { return impl_->fused_out(); }
std::size_t Layer::out_elems() const { return impl_->out_elems(); }
const FusedSchedule& Layer::schedule() const { return impl_->schedule; }
cudaStream_t Layer::stream() const { return impl_->rank.stream(); }

}  // namespace xstage::ulysses
