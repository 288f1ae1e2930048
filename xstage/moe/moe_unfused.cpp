// Unfused EP MoE: NCCL all-to-all-v, cuBLAS grouped GEMMs (per-expert fallback), SwiGLU, combine.
//
// Exchange order. Source s sends to d the rows of d's recv that come from s, in
// d's row order (send_row ascending); d receives them contiguously and scatters
// them to those rows. The way back is the same lists reversed: d gathers its rows
// from s in row order, s receives them and scatters to comb[token*k + slot].
#include "xstage/moe/unfused.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/check.hpp"
#include "common/cuda_check.hpp"
#include "xstage/comm/comm.hpp"
#include "common/device_buffer.hpp"

#define XS_CHECK_CUBLAS(call)                                                                 \
  do {                                                                                        \
    cublasStatus_t st_ = (call);                                                              \
    XS_ASSERT(st_ == CUBLAS_STATUS_SUCCESS, "{} failed: cuBLAS status {}", #call, int(st_)); \
  } while (0)

namespace xstage::moe {

struct UnfusedMoe::Impl {
  comm::Rank& rank;
  Problem p;
  const std::uint16_t *w1, *w2, *x;
  const float* weight;
  cublasHandle_t blas = nullptr;
  std::vector<int> send_cnt, recv_cnt, send_displ, recv_displ, expert_offset;
  DeviceBuffer<int> pack_token, pack_slot, unpack_row;
  DeviceBuffer<std::uint16_t> sendbuf, recvstage, recv, h, y, back, comb, out;
  DeviceBuffer<std::uint16_t> g;  // L1 output [rows, 2I] bf16 (cuBLAS refuses a grouped bf16 -> fp32 GEMM)
  cudaEvent_t ev[4]{};
  // Grouped GEMMs: one group per non-empty local expert (group size 1), host-side
  // shapes, device-side pointer arrays (fixed by the layout, so built once).
  struct Grouped {
    std::vector<cublasOperation_t> ta, tb;
    std::vector<int> m, n, k, lda, ldb, ldc, size;
    std::vector<float> alpha, beta;
    DeviceBuffer<const void*> a, b;
    DeviceBuffer<void*> c;
  } l1, l2;
  bool grouped = true;
  bool grouped_refused = false;
  std::string gemm_path = "grouped";
};

namespace {
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& v) {
  DeviceBuffer<T> b(std::max<std::size_t>(1, v.size()));
  if (!v.empty()) copy_to_device(b.get(), v.data(), v.size() * sizeof(T));
  return b;
}

// The grouped form of gemm_nt below, one group per (a, b, c, rows) problem.
template <class Grouped>
void plan_grouped(Grouped& g, const std::vector<int>& rows, int n, int k, const std::uint16_t* a0, std::size_t a_step,
                  const std::uint16_t* b0, std::size_t b_step, void* c0, std::size_t c_step_bytes,
                  const std::vector<int>& row0) {
  std::vector<const void*> a, b;
  std::vector<void*> c;
  for (std::size_t e = 0; e < rows.size(); ++e) {
    if (!rows[e]) continue;
    g.ta.push_back(CUBLAS_OP_T);
    g.tb.push_back(CUBLAS_OP_N);
    g.m.push_back(n);
    g.n.push_back(rows[e]);
    g.k.push_back(k);
    g.lda.push_back(k);
    g.ldb.push_back(k);
    g.ldc.push_back(n);
    g.size.push_back(1);
    g.alpha.push_back(1.0f);
    g.beta.push_back(0.0f);
    b.push_back(a0 + std::size_t(row0[e]) * a_step);  // cuBLAS's B: this expert's activations
    a.push_back(b0 + e * b_step);                     // cuBLAS's A: this expert's weights
    c.push_back(static_cast<char*>(c0) + std::size_t(row0[e]) * c_step_bytes);
  }
  g.a = to_device(a);
  g.b = to_device(b);
  g.c = to_device(c);
}

template <class Grouped>
cublasStatus_t run_grouped(cublasHandle_t h, const Grouped& g, cudaDataType ctype) {
  if (g.size.empty()) return CUBLAS_STATUS_SUCCESS;
  return cublasGemmGroupedBatchedEx(h, g.ta.data(), g.tb.data(), g.m.data(), g.n.data(), g.k.data(), g.alpha.data(),
                                    g.a.get(), CUDA_R_16BF, g.lda.data(), g.b.get(), CUDA_R_16BF, g.ldb.data(),
                                    g.beta.data(), g.c.get(), ctype, g.ldc.data(), static_cast<int>(g.size.size()),
                                    g.size.data(), CUBLAS_COMPUTE_32F);
}

// row-major C[M,N] = A[M,K] * B[N,K]^T  (cuBLAS is column-major: C^T = B * A^T).
void gemm_nt(cublasHandle_t h, int m, int n, int k, const std::uint16_t* a, const std::uint16_t* b, void* c,
             cudaDataType ctype) {
  const float alpha = 1, beta = 0;
  XS_CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, k, a, CUDA_R_16BF, k,
                               &beta, c, ctype, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
}  // namespace

UnfusedMoe::UnfusedMoe(comm::Rank& rank, const Problem& p, const Layout& L, const std::uint16_t* w1,
                       const std::uint16_t* w2, const std::uint16_t* x, const float* weight)
    : impl_(new Impl{rank, p, w1, w2, x, weight}) {
  Impl& m = *impl_;
  const int me = rank.rank(), P = p.ranks, H = p.hidden, TK = p.tokens_per_rank * p.topk;
  XS_CHECK_CUDA(cudaSetDevice(rank.device()));
  // Send lists: my slots grouped by destination, in the destination's row order.
  std::vector<int> slots(TK);
  std::iota(slots.begin(), slots.end(), 0);
  const RankLayout& S = L.ranks[me];
  std::sort(slots.begin(), slots.end(), [&](int a, int b) {
    return S.send_rank[a] != S.send_rank[b] ? S.send_rank[a] < S.send_rank[b] : S.send_row[a] < S.send_row[b];
  });
  std::vector<int> tokens(TK);
  for (int i = 0; i < TK; ++i) tokens[i] = slots[i] / p.topk;
  m.send_cnt.assign(P, 0);
  for (int i = 0; i < TK; ++i) ++m.send_cnt[S.send_rank[i]];
  // Receive lists: my recv rows grouped by source, ascending.
  const RankLayout& R = L.ranks[me];
  std::vector<int> rows(R.rows());
  std::iota(rows.begin(), rows.end(), 0);
  std::stable_sort(rows.begin(), rows.end(), [&](int a, int b) { return R.recv_src_rank[a] < R.recv_src_rank[b]; });
  m.recv_cnt = R.recv_from;
  m.send_displ.assign(P, 0);
  m.recv_displ.assign(P, 0);
  for (int d = 1; d < P; ++d) {
    m.send_displ[d] = m.send_displ[d - 1] + m.send_cnt[d - 1];
    m.recv_displ[d] = m.recv_displ[d - 1] + m.recv_cnt[d - 1];
  }
  m.expert_offset = R.expert_offset;
  m.pack_token = to_device(tokens);
  m.pack_slot = to_device(slots);
  m.unpack_row = to_device(rows);
  const std::size_t nrows = std::max(1, R.rows());
  m.sendbuf = DeviceBuffer<std::uint16_t>(std::size_t(TK) * H);
  m.recvstage = DeviceBuffer<std::uint16_t>(nrows * H);
  m.recv = DeviceBuffer<std::uint16_t>(nrows * H);
  m.g = DeviceBuffer<std::uint16_t>(nrows * 2 * p.intermediate);
  m.h = DeviceBuffer<std::uint16_t>(nrows * p.intermediate);
  m.y = DeviceBuffer<std::uint16_t>(nrows * H);
  m.back = DeviceBuffer<std::uint16_t>(std::size_t(TK) * H);
  m.comb = DeviceBuffer<std::uint16_t>(std::size_t(TK) * H);
  m.out = DeviceBuffer<std::uint16_t>(std::size_t(p.tokens_per_rank) * H);
  XS_CHECK_CUBLAS(cublasCreate(&m.blas));
  XS_CHECK_CUBLAS(cublasSetStream(m.blas, rank.stream()));
  std::vector<int> rows_e(p.experts_per_rank()), row0(p.experts_per_rank());
  for (int e = 0; e < p.experts_per_rank(); ++e) {
    row0[e] = m.expert_offset[e];
    rows_e[e] = m.expert_offset[e + 1] - m.expert_offset[e];
  }
  const int I = p.intermediate;
  plan_grouped(m.l1, rows_e, 2 * I, H, m.recv.get(), H, w1, std::size_t(2) * I * H, m.g.get(), 2 * I * sizeof(std::uint16_t),
               row0);
  plan_grouped(m.l2, rows_e, H, I, m.h.get(), I, w2, std::size_t(H) * I, m.y.get(), H * sizeof(std::uint16_t), row0);
  for (auto& e : m.ev) XS_CHECK_CUDA(cudaEventCreate(&e));
}

UnfusedMoe::~UnfusedMoe() {
  cudaSetDevice(impl_->rank.device());
  for (auto& e : impl_->ev) cudaEventDestroy(e);
  if (impl_->blas) cublasDestroy(impl_->blas);
  delete impl_;
}

std::uint16_t* UnfusedMoe::out() const { return impl_->out.get(); }
const std::string& UnfusedMoe::gemm_path() const { return impl_->gemm_path; }

void UnfusedMoe::force_per_expert_loop(bool on) {
  Impl& m = *impl_;
  if (m.grouped_refused) return;  // the loop already, and gemm_path says why
  m.grouped = !on;
  m.gemm_path = on ? "per-expert loop" : "grouped";
}

void UnfusedMoe::choose_gemm_path(int trials) {
  XS_ASSERT(trials >= 1, "unfused moe: choose_gemm_path needs trials >= 1 (got {})", trials);
  Impl& m = *impl_;
  if (m.grouped_refused) return;
  double med[2] = {0, 0};  // grouped, loop
  for (int loop = 0; loop < 2; ++loop) {
    force_per_expert_loop(loop == 1);
    std::vector<double> t;
    for (int i = 0; i < trials; ++i) t.push_back(forward().gemm_us);
    std::sort(t.begin(), t.end());
    med[loop] = t[t.size() / 2];
    if (m.grouped_refused) return;
  }
  const bool loop = med[1] < med[0];
  force_per_expert_loop(loop);
  m.gemm_path = fmt::format("{} (faster: grouped {:.1f} us, per-expert loop {:.1f} us)",
                            loop ? "per-expert loop" : "grouped", med[0], med[1]);
}

// One layer's expert GEMMs (layer 1: recv x W1^T -> G; layer 2: H x W2^T -> Y) in
// `form`. The grouped call may be refused by cuBLAS for these types: nothing is then
// launched, this and every later call take the per-expert loop, and gemm_path says why.
// (L1 with fp32 out was refused as a grouped GEMM on the H200 with CUDA 13.0, status 15
// NOT_SUPPORTED; bf16 out is what frameworks' grouped GEMMs give too.)
void UnfusedMoe::layer_gemms(Impl& m, int layer, GemmForm form) {
  using F = GemmForm;
  const int H = m.p.hidden, I = m.p.intermediate, experts = m.p.experts_per_rank();
  const int n = layer == 1 ? 2 * I : H, k = layer == 1 ? H : I;
  const std::uint16_t* a = layer == 1 ? m.recv.get() : m.h.get();
  const std::uint16_t* w = layer == 1 ? m.w1 : m.w2;
  std::uint16_t* c = layer == 1 ? m.g.get() : m.y.get();
  if (form == F::grouped) {
    const cublasStatus_t s = run_grouped(m.blas, layer == 1 ? m.l1 : m.l2, CUDA_R_16BF);
    if (s == CUBLAS_STATUS_SUCCESS) return;
    m.grouped = false;
    m.grouped_refused = true;
    m.gemm_path = "per-expert loop (grouped GEMM refused: cuBLAS status " + std::to_string(int(s)) + ")";
    form = F::per_expert_loop;
  }
  if (form == F::batched) {  // column-major C^T[n, rows] = W[n, k] x A^T[k, rows] per expert
    const int rows = m.expert_offset.back() / experts;
    const float alpha = 1, beta = 0;
    XS_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
        m.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, w, CUDA_R_16BF, k, std::int64_t(n) * k, a, CUDA_R_16BF,
        k, std::int64_t(rows) * k, &beta, c, CUDA_R_16BF, n, std::int64_t(rows) * n, experts, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
    return;
  }
  for (int e = 0; e < experts; ++e) {
    const int r0 = m.expert_offset[e], rows = m.expert_offset[e + 1] - r0;
    if (rows)
      gemm_nt(m.blas, rows, n, k, a + std::size_t(r0) * k, w + std::size_t(e) * n * k, c + std::size_t(r0) * n,
              CUDA_R_16BF);
  }
}

std::vector<UnfusedMoe::GemmForm> UnfusedMoe::gemm_forms() const {
  const Impl& m = *impl_;
  std::vector<GemmForm> f;
  const int rows = m.expert_offset.back(), experts = m.p.experts_per_rank();
  if (rows > 0 && rows % experts == 0) f.push_back(GemmForm::batched);
  if (!m.grouped_refused) f.push_back(GemmForm::grouped);
  f.push_back(GemmForm::per_expert_loop);
  return f;
}

void UnfusedMoe::expert_gemms(GemmForm form) {
  XS_CHECK_CUDA(cudaSetDevice(impl_->rank.device()));
  layer_gemms(*impl_, 1, form);
  layer_gemms(*impl_, 2, form);
}

const char* UnfusedMoe::name(GemmForm form) {
  return form == GemmForm::batched ? "batched" : form == GemmForm::grouped ? "grouped" : "per-expert loop";
}

UnfusedTimes UnfusedMoe::forward() {
  Impl& m = *impl_;
  const Problem& p = m.p;
  const int P = p.ranks, H = p.hidden, I = p.intermediate, TK = p.tokens_per_rank * p.topk;
  cudaStream_t st = m.rank.stream();
  ncclComm_t comm = m.rank.comm();
  XS_CHECK_CUDA(cudaSetDevice(m.rank.device()));
  auto all_to_all = [&](const std::uint16_t* send, const std::vector<int>& scnt, const std::vector<int>& sdis,
                        std::uint16_t* recvp, const std::vector<int>& rcnt, const std::vector<int>& rdis) {
    XS_CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < P; ++d) {
      if (scnt[d]) XS_CHECK_NCCL(ncclSend(send + std::size_t(sdis[d]) * H, std::size_t(scnt[d]) * H, ncclBfloat16, d, comm, st));
      if (rcnt[d]) XS_CHECK_NCCL(ncclRecv(recvp + std::size_t(rdis[d]) * H, std::size_t(rcnt[d]) * H, ncclBfloat16, d, comm, st));
    }
    XS_CHECK_NCCL(ncclGroupEnd());
  };
  XS_CHECK_CUDA(cudaEventRecord(m.ev[0], st));
  // Dispatch.
  gather_rows(m.sendbuf.get(), m.x, m.pack_token.get(), TK, H, st);
  all_to_all(m.sendbuf.get(), m.send_cnt, m.send_displ, m.recvstage.get(), m.recv_cnt, m.recv_displ);
  const int rows = m.expert_offset.back();
  scatter_rows(m.recv.get(), m.recvstage.get(), m.unpack_row.get(), rows, H, st);
  XS_CHECK_CUDA(cudaEventRecord(m.ev[1], st));
  // Experts: L1, SwiGLU, L2, all bf16 out (fp32 accumulation).
  layer_gemms(m, 1, m.grouped ? GemmForm::grouped : GemmForm::per_expert_loop);
  swiglu(m.h.get(), m.g.get(), rows, I, st);
  layer_gemms(m, 2, m.grouped ? GemmForm::grouped : GemmForm::per_expert_loop);
  XS_CHECK_CUDA(cudaEventRecord(m.ev[2], st));
  // Combine: rows back to their owners, then the weighted sum.
  gather_rows(m.recvstage.get(), m.y.get(), m.unpack_row.get(), rows, H, st);
  all_to_all(m.recvstage.get(), m.recv_cnt, m.recv_displ, m.back.get(), m.send_cnt, m.send_displ);
  scatter_rows(m.comb.get(), m.back.get(), m.pack_slot.get(), TK, H, st);
  weighted_combine(m.out.get(), m.comb.get(), m.weight, p.tokens_per_rank, p.topk, H, st);
  XS_CHECK_CUDA(cudaEventRecord(m.ev[3], st));
  XS_CHECK_CUDA(cudaEventSynchronize(m.ev[3]));
  UnfusedTimes t;
  float ms = 0;
  XS_CHECK_CUDA(cudaEventElapsedTime(&ms, m.ev[0], m.ev[3]));
  t.total_us = ms * 1e3f;
  XS_CHECK_CUDA(cudaEventElapsedTime(&ms, m.ev[1], m.ev[2]));
  t.gemm_us = ms * 1e3f;
  return t;
}

}  // namespace xstage::moe
