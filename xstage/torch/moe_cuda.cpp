// CUDA paths of torch.ops.xstage.moe_forward and moe_grouped: the fused persistent MoE
// kernel at EP = 1 (a one-rank moe::OneGpuGroup: the kernel's window is plain device
// memory, no NCCL communicator), on the current torch stream. GPUs other than sm_90
// take the CPU reference through host copies.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "checks.hpp"
#include "ops.hpp"
#include "xstage/moe/sm90_moe_fused.hpp"

namespace xstage::torch_ops {

namespace {
constexpr const char* kForward = "xstage.moe_forward";
constexpr const char* kGrouped = "xstage.moe_grouped";

// One kernel instance (window, scratch, counters) per device, stream, shape and input
// kind: a FusedMoe takes its inputs one way only, and is bound to a stream.
struct Key {
  int device;
  cudaStream_t stream;
  int tokens, experts, topk, hidden, inter;
  bool grouped;
  auto tie() const { return std::tie(device, stream, tokens, experts, topk, hidden, inter, grouped); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};
struct Entry {
  std::unique_ptr<moe::OneGpuGroup> group;  // before fused: destroyed after it
  std::unique_ptr<moe::FusedMoe> fused;
  moe::ScheduleConfig config;               // moe_forward: chosen for the expected counts
};
constexpr std::size_t kMaxEntries = 8;

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
// Never destroyed: at exit the CUDA context may already be gone.
std::map<Key, Entry>& cache() {
  static auto* c = new std::map<Key, Entry>();
  return *c;
}

// The entry of `key`, made on first use; the oldest shapes go when there are too many
// (after their stream has finished with them). Call with cache_mutex() held.
Entry& entry_for(const Key& key, const moe::Problem& p, int max_rows) {
  auto& c = cache();
  if (auto it = c.find(key); it != c.end()) return it->second;
  while (c.size() >= kMaxEntries) {
    C10_CUDA_CHECK(cudaStreamSynchronize(c.begin()->first.stream));
    c.erase(c.begin());
  }
  Entry e;
  e.group = std::make_unique<moe::OneGpuGroup>(p, max_rows);
  e.fused = std::make_unique<moe::FusedMoe>(*e.group, 0, key.stream);
  // EP = 1 stores nothing remotely: Expert-Wave, and the advisor's parameters are unused.
  e.config = moe::choose_schedule(moe::ScheduleKind::expert_wave, p, moe::expected_tiles(p), e.fused->blocks(),
                                  burstgap::example_params("peer"));
  return c.emplace(key, std::move(e)).first->second;
}

const std::uint16_t* bits(const at::Tensor& t) { return reinterpret_cast<const std::uint16_t*>(t.data_ptr()); }

at::Tensor copy_out(const moe::FusedMoe& fused, const MoeShape& s, const at::Tensor& like, cudaStream_t stream) {
  at::Tensor out = at::empty({s.tokens, s.hidden}, like.options());
  C10_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), fused.out(), out.nbytes(), cudaMemcpyDeviceToDevice, stream));
  return out;
}
}  // namespace

at::Tensor moe_forward_cuda(const at::Tensor& x, const at::Tensor& logits, const at::Tensor& w1,
                            const at::Tensor& w2, int64_t topk) {
  const MoeShape s = check_moe_forward(x, logits, w1, w2, topk);
  const int device = x.device().index();
  if (!is_sm90(device)) return moe_forward_cpu(x.cpu(), logits.cpu(), w1.cpu(), w2.cpu(), topk).to(x.device());
  check_value(topk <= moe::route::kTopkMax, kForward,
              "routing on the GPU takes topk <= " + std::to_string(moe::route::kTopkMax));
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const moe::Problem p = moe_problem(s);
  const std::lock_guard lock(cache_mutex());
  return translate_errors(kForward, [&] {
    Entry& e = entry_for({device, stream, p.tokens_per_rank, p.experts, p.topk, p.hidden, p.intermediate, false}, p,
                         moe::route::max_recv_rows(p));
    e.fused->set_weights(bits(w1), bits(w2));
    e.fused->route_on_device(bits(x), logits.data_ptr<float>(), e.config);
    e.fused->launch();
    return copy_out(*e.fused, s, x, stream);
  });
}

at::Tensor moe_grouped_cuda(const at::Tensor& rows, at::IntArrayRef counts, const at::Tensor& w1,
                            const at::Tensor& w2) {
  const MoeShape s = check_moe_grouped(rows, counts, w1, w2);
  if (s.tokens == 0) return at::empty({0, s.hidden}, rows.options());
  const int device = rows.device().index();
  if (!is_sm90(device)) return moe_grouped_cpu(rows.cpu(), counts, w1.cpu(), w2.cpu()).to(rows.device());
  const c10::cuda::CUDAGuard guard(rows.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const moe::Problem p = moe_problem(s);
  const std::lock_guard lock(cache_mutex());
  return translate_errors(kGrouped, [&] {
    const moe::Routing routing = grouped_routing(counts);
    const moe::Layout layout = moe::build_layout(p, {routing});
    Entry& e = entry_for({device, stream, p.tokens_per_rank, p.experts, 1, p.hidden, p.intermediate, true}, p,
                         layout.max_rows());
    const moe::TileLists tiles = moe::build_tiles(p, layout.ranks[0]);
    const moe::ScheduleConfig cfg = moe::choose_schedule(moe::ScheduleKind::expert_wave, p, tiles, e.fused->blocks(),
                                                         burstgap::example_params("peer"));
    e.fused->set_weights(bits(w1), bits(w2));
    e.fused->set_inputs(bits(rows), routing, layout, moe::make_scheduler(cfg)->order(tiles));
    e.fused->launch();
    return copy_out(*e.fused, s, rows, stream);
  });
}

}  // namespace xstage::torch_ops
