// The DiT block's MoE FFN on one rank (design in dit_moe_ffn.hpp).
#include "xstage/dit/moe_ffn.hpp"

#include <chrono>

#include "common/check.hpp"
#include "xstage/moe/sm90_moe_fused.hpp"
#include "common/cuda_check.hpp"
#include "xstage/comm/comm.hpp"

namespace xstage::dit {

MoeFfn::MoeFfn(comm::Rank& rank, const Config& c, int64_t tokens, const burstgap::ModelParams& params)
    : rank_(rank),
      p_(moe_problem(c, tokens, rank.nranks())),
      params_(params),
      raster_group_(c.moe_raster_group),
      device_routing_(c.moe_device_routing) {
  XS_ASSERT(raster_group_ >= 1, "dit: the MoE raster group must be >= 1 (got {})", raster_group_);
  XS_ASSERT(!device_routing_ || p_.topk <= moe::route::kTopkMax,
            "dit: {}: routing on the GPU takes top-k <= {} (got {}); use --moe-routing host", c.name,
            moe::route::kTopkMax, p_.topk);
  const size_t local = size_t(p_.tokens_per_rank) * p_.experts;
  fused_ = std::make_unique<moe::FusedMoe>(rank, p_, moe::route::max_recv_rows(p_));
  logits_ = DeviceBuffer<float>(local);
  if (device_routing_) {
    device_schedule_ = moe::choose_schedule(moe::ScheduleKind::interleaved, p_, moe::expected_tiles(p_, raster_group_),
                                            fused_->blocks(), params_);
    return;
  }
  if (p_.ranks > 1) gathered_ = DeviceBuffer<float>(local * p_.ranks);
  void* h = nullptr;
  XS_CHECK_CUDA(cudaMallocHost(&h, local * p_.ranks * sizeof(float)));
  host_ = static_cast<float*>(h);
}

MoeFfn::~MoeFfn() {
  if (host_) cudaFreeHost(host_);
  for (auto& e : events_)
    for (cudaEvent_t x : e) cudaEventDestroy(x);
}

void MoeFfn::record(int which) {
  if (which == 0 && pending_ == events_.size()) {
    std::array<cudaEvent_t, 3> e{};
    for (auto& x : e) XS_CHECK_CUDA(cudaEventCreate(&x));
    events_.push_back(e);
  }
  XS_CHECK_CUDA(cudaEventRecord(events_[pending_][which], rank_.stream()));
  if (which == 2) ++pending_;
}

void MoeFfn::collect() {
  for (std::size_t i = 0; i < pending_; ++i) {
    float plan = 0, kernel = 0;
    XS_CHECK_CUDA(cudaEventElapsedTime(&plan, events_[i][0], events_[i][1]));
    XS_CHECK_CUDA(cudaEventElapsedTime(&kernel, events_[i][1], events_[i][2]));
    times_.plan_gpu_us += 1e3 * plan;
    times_.kernel_gpu_us += 1e3 * kernel;
  }
  pending_ = 0;
}

void MoeFfn::synchronize() {
  fused_->synchronize();
  collect();
}

void MoeFfn::reset_host_times() {
  synchronize();
  times_ = {};
}

const std::uint16_t* MoeFfn::forward(const std::uint16_t* h, const std::uint16_t* w1, const std::uint16_t* w2) {
  if (device_routing_) {
    fused_->set_weights(w1, w2);
    record(0);
    fused_->route_on_device(h, logits_.get(), device_schedule_, raster_group_);
    record(1);
    fused_->launch();
    record(2);
    ++times_.forwards;
    return fused_->out();
  }
  const size_t local = size_t(p_.tokens_per_rank) * p_.experts, all = local * p_.ranks;
  cudaStream_t st = rank_.stream();
  const float* src = logits_.get();
  if (p_.ranks > 1) {
    XS_CHECK_NCCL(ncclAllGather(logits_.get(), gathered_.get(), local, ncclFloat32, rank_.comm(), st));
    src = gathered_.get();
  }
  using clock = std::chrono::steady_clock;
  const auto us = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
  };
  const auto t0 = clock::now();
  XS_CHECK_CUDA(cudaMemcpyAsync(host_, src, all * sizeof(float), cudaMemcpyDeviceToHost, st));
  synchronize();  // the host needs the logits; a timed-out wait of the last launch is named here
  const auto t1 = clock::now();
  const MoeRoute route = moe_route(p_, std::vector<float>(host_, host_ + all));
  const int r = rank_.rank();
  const std::vector<moe::WorkItem> order = moe_order(p_, route, r, fused_->blocks(), params_, raster_group_);
  const auto t2 = clock::now();
  fused_->set_weights(w1, w2);
  fused_->set_inputs(h, route.routing[size_t(r)], route.layout, order);
  record(0);
  record(1);
  fused_->launch();
  record(2);
  const auto t3 = clock::now();
  times_.wait_us += us(t0, t1);
  times_.route_us += us(t1, t2);
  times_.upload_us += us(t2, t3);
  ++times_.forwards;
  return fused_->out();
}

}  // namespace xstage::dit
