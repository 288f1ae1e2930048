// Expert-parallel MoE: problem, routing, dispatch/combine layout, tile lists,
// schedules and a host reference. Host C++, no GPU (the fused kernel and its
// launcher are xstage/moe/sm90_moe_fused.*; docs/xstage-moe.md has the design).
//
// Shapes (per rank r of P; E experts, E/P on each rank; top-k routing):
//   x       [T, hidden]            bf16, rank r's tokens
//   routing [T, k]                 expert id (global) and weight per (token, slot)
//   W1      [E/P, 2*I, hidden]     bf16, rows 0..I-1 gate, I..2I-1 up (K-major)
//   W2      [E/P, hidden, I]       bf16 (K-major)
//   recv    [rows_r, hidden]       rows dispatched to rank r, grouped by local expert,
//                                  then by source rank, then by (token, slot)
//   H       [rows_r, I]            SwiGLU(gate, up), bf16
//   comb    [T*k, hidden]          on the token's owner: expert output of (token, slot)
//   out     [T, hidden]            bf16, sum_k weight * comb (fp32 sum, one rounding)
#pragma once

#include "xstage/moe/problem.hpp"
#include "xstage/moe/routing.hpp"
#include "xstage/moe/layout.hpp"
#include "xstage/moe/schedule.hpp"
#include "xstage/moe/kernel_plan.hpp"
#include "xstage/moe/reference.hpp"
