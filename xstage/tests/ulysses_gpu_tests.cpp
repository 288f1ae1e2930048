// GPU tests of the Ulysses layer (label gpu): on 2 ranks (4 when visible) the
// fused output equals the serial one bitwise on every rank, for both
// completion modes, and so does the coarse-overlap baseline; all three are
// close to the fp64 CPU attention on the gathered sequence; a slow peer only
// delays the receiver, an absent one makes it time out with a message naming
// the rank and the flag (in a child process: the trap ends its CUDA context).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "common/test_child.hpp"
#include "xstage/attention.hpp"
#include "xstage/check_cuda.hpp"
#include "xstage/comm.hpp"
#include "xstage/device_buffer.hpp"
#include "xstage/ulysses_cuda.hpp"

namespace {

using namespace xstage;
using namespace xstage::ulysses;

burstgap::ModelParams params() {
  burstgap::ModelParams m;
  m.t0_ns_per_byte = 0.0198;
  m.issue_latency_ns = 176;
  m.drain_GBps = 419;
  m.capacity_bytes_gpu = 11.2e6;
  return m;
}

struct Inputs {  // every rank's Q, K, V as bf16 bits, and the full tensors as floats
  std::vector<std::vector<uint16_t>> q, k, v;
  std::vector<float> fq, fk, fv;
};

Inputs make_inputs(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t S = p.seq, R = p.rows_per_rank(), HD = p.heads * p.head_dim, B = p.batch;
  Inputs in;
  for (auto* f : {&in.fq, &in.fk, &in.fv}) {
    f->resize(B * S * HD);
    for (auto& x : *f) x = attention::bf16_bits_to_float(attention::float_to_bf16_bits(nd(rng)));
  }
  auto split = [&](const std::vector<float>& f, std::vector<std::vector<uint16_t>>& out) {
    out.assign(p.ranks, {});
    for (int r = 0; r < p.ranks; ++r)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < R * HD; ++i) out[r].push_back(attention::float_to_bf16_bits(f[(b * S + r * R) * HD + i]));
  };
  split(in.fq, in.q);
  split(in.fk, in.k);
  split(in.fv, in.v);
  return in;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size());
  XS_CHECK_CUDA(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

std::vector<uint16_t> download(const uint16_t* d, std::size_t n) {
  std::vector<uint16_t> h(n);
  XS_CHECK_CUDA(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

void sync_or_throw(cudaStream_t st, int rank) {
  const cudaError_t e = cudaStreamSynchronize(st);
  if (e != cudaSuccess) throw std::runtime_error("rank " + std::to_string(rank) + ": " + cudaGetErrorString(e));
}

// Runs every path on P ranks and checks them; `slow_rank` delays its fused launch.
void run_case(const Problem& p, int slow_rank = -1) {
  SCOPED_TRACE(describe(p));
  const Inputs in = make_inputs(p, 1234 + p.seq + p.ranks);
  std::mutex mu;
  std::vector<std::vector<uint16_t>> fused(p.ranks);
  std::vector<std::string> failures;
  comm::run_ranks(p.ranks, comm::Launch::threads, [&](comm::Rank& rank) {
    const int r = rank.rank();
    cudaStream_t st = rank.stream();
    auto q = upload(in.q[r]), k = upload(in.k[r]), v = upload(in.v[r]);
    Layer layer(rank, p, params());
    layer.set_inputs(q.get(), k.get(), v.get());
    const std::size_t n = layer.out_elems();
    layer.pre_attention();
    layer.serial();
    sync_or_throw(st, r);
    const auto want = download(layer.serial_out(), n);
    std::vector<std::string> bad;
    // Both signal modes, each twice receiver-complete: a miscount in one forward would
    // let the next one's wait pass before its slices are in (caught by the poison).
    const std::pair<Completion, FusedSignal> runs[] = {
        {Completion::receiver_complete, FusedSignal::per_cta},   {Completion::receiver_complete, FusedSignal::per_slice},
        {Completion::receiver_complete, FusedSignal::per_cta},   {Completion::sender_visible, FusedSignal::per_cta},
        {Completion::receiver_complete, FusedSignal::per_slice}, {Completion::sender_visible, FusedSignal::per_slice},
        {Completion::receiver_complete, FusedSignal::automatic}};
    for (const auto& [c, sig] : runs) {
      const std::string what = std::string(to_string(c)) + ", " + to_string(sig);
      XS_CHECK_CUDA(cudaMemset(const_cast<uint16_t*>(layer.fused_out()), 0xFF, n * 2));
      XS_CHECK_CUDA(cudaDeviceSynchronize());
      rank.host_barrier();
      if (r == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      layer.fused(c, sig);
      sync_or_throw(st, r);
      if (c == Completion::receiver_complete) {
        // Complete before any peer-side synchronisation: the wait is what guarantees it.
        const auto got = download(layer.fused_out(), n);
        if (std::memcmp(got.data(), want.data(), n * 2) != 0)
          bad.push_back("rank " + std::to_string(r) + ": fused (" + what + ", before the barrier) != serial");
      }
      rank.host_barrier();
      const auto got = download(layer.fused_out(), n);
      if (std::memcmp(got.data(), want.data(), n * 2) != 0)
        bad.push_back("rank " + std::to_string(r) + ": fused (" + what + ") != serial");
      if (c == Completion::receiver_complete) {
        std::lock_guard lock(mu);
        fused[r] = got;
      }
    }
    if (p.batch == 1) {
      layer.coarse();
      sync_or_throw(st, r);
      if (std::memcmp(download(layer.coarse_out(), n).data(), want.data(), n * 2) != 0)
        bad.push_back("rank " + std::to_string(r) + ": coarse != serial");
    }
    rank.host_barrier();
    std::lock_guard lock(mu);
    failures.insert(failures.end(), bad.begin(), bad.end());
  });
  for (const auto& f : failures) ADD_FAILURE() << f;

  // Against the fp64 attention of the gathered sequence.
  const auto ref = attention::reference_fwd(in.fq, in.fk, in.fv, p.batch, p.seq, p.seq, p.heads, p.head_dim,
                                            p.causal, 1.0 / std::sqrt(double(p.head_dim)));
  const int64_t S = p.seq, R = p.rows_per_rank(), HD = p.heads * p.head_dim;
  double num = 0, den = 0, mx = 0;
  for (int r = 0; r < p.ranks; ++r)
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < R * HD; ++i) {
        const double x = attention::bf16_bits_to_float(fused[r][b * R * HD + i]);
        const double y = ref.o[(b * S + r * R) * HD + i];
        num += (x - y) * (x - y);
        den += y * y;
        mx = std::max(mx, std::isfinite(x) ? std::abs(x - y) : INFINITY);
      }
  // bf16 output and P: about 2^-8 relative per element (the attention tests pin it down more tightly).
  EXPECT_LT(std::sqrt(num / den), 1e-2);
  EXPECT_LT(mx, 3e-2);
}

int gpus() { return comm::visible_gpus(); }

}  // namespace

TEST(UlyssesGpu, FusedEqualsSerialTwoRanks) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  run_case({2, 1, 1024, 4, 64});
  run_case({2, 1, 2048, 6, 128});
  run_case({2, 2, 512, 4, 64});
  run_case({2, 1, 1024, 4, 128, true});
}

TEST(UlyssesGpu, FusedEqualsSerialFourRanks) {
  if (gpus() < 4) GTEST_SKIP() << "needs 4 GPUs (" << gpus() << " visible)";
  run_case({4, 1, 2048, 8, 128});
  run_case({4, 1, 1024, 4, 64, true});
}

TEST(UlyssesGpu, SlowPeerOnlyDelaysTheReceiver) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  run_case({2, 1, 1024, 4, 64}, 1);
}

TEST(UlyssesGpu, TooManyRanksIsAClearError) {
  try {
    comm::run_ranks(1, comm::Launch::threads, [](comm::Rank& rank) {
      Layer layer(rank, {gpus() + 1, 1, 4096, 24 * (gpus() + 1), 128}, params());
    });
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("GPUs, but only"), std::string::npos) << e.what();
  }
}

// The child re-executes this binary; rank 1 never launches its fused kernel.
std::pair<int, std::string> run_child(const std::string& name) {
  return common::run_self_as_child(name, "XSTAGE_WAIT_TIMEOUT_MS=300");
}

int child_main(const std::string& name) {
  if (name != "absent") return 2;
  try {
    const Problem p{2, 1, 1024, 4, 64};
    comm::run_ranks(2, comm::Launch::threads, [&](comm::Rank& rank) {
      const std::size_t n = p.rows_per_rank() * p.heads * p.head_dim;
      DeviceBuffer<uint16_t> x(n);
      XS_CHECK_CUDA(cudaMemset(x.get(), 0, n * 2));
      Layer layer(rank, p, params());
      layer.set_inputs(x.get(), x.get(), x.get());
      layer.pre_attention();
      if (rank.rank() == 1) {  // absent: never sends its slices
        XS_CHECK_CUDA(cudaStreamSynchronize(rank.stream()));
        std::this_thread::sleep_for(std::chrono::seconds(30));
        return;
      }
      layer.fused(Completion::receiver_complete);
      const cudaError_t e = cudaStreamSynchronize(rank.stream());
      std::fflush(stdout);
      std::printf("child: rank 0 sync: %s\n", cudaGetErrorString(e));
      std::fflush(stdout);
      std::_Exit(e == cudaSuccess ? 0 : 7);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %s: %s\n", name.c_str(), e.what());
    return 1;
  }
  return 3;
}

TEST(UlyssesGpu, AbsentPeerTimesOutNamingRankAndFlag) {
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  auto [code, out] = run_child("absent");
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("xstage device timeout: ulysses rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("source rank 1's tiles (flag: slice counter 1"), std::string::npos) << out;
}

int main(int argc, char** argv) { return common::test_main_with_children(argc, argv, child_main); }
