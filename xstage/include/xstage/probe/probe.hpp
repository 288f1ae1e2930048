// The X-Stage probe: sweeps burst configurations on this node's GPUs and returns
// one SweepRow per configuration (xstage/probe/sweep.hpp). Rank 0 issues; the other
// ranks receive (and, in visible mode, observe the per-burst release flags).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/host_device.hpp"
#include "xstage/probe/sweep.hpp"

namespace xstage::probe {

// Most destinations of one sender (all_peers on 17 GPUs); the kernel's argument array.
inline constexpr int kMaxDst = 16;

// The ranks rank 0 stores to: local {0}, peer {1}, all_peers {1, ..., gpus - 1}, host
// {0} (rank 0's mapped pinned host memory: every store crosses the host link).
// Throws (one line) for an unknown pattern, fewer GPUs than the pattern needs, or
// more destinations than kMaxDst.
std::vector<int> destinations(const std::string& pattern, int gpus);

// Destination index of row `row` (one row = a block's stores of one width, or one
// TMA chunk) for SM `sm` over n_dst destinations: round-robin, as in an All-to-All.
XS_HD int probe_dst_of_row(int row, int sm, int n_dst) { return (row + sm) % n_dst; }

// The value stored at 32-bit word `word` of burst `burst` from SM `sm` (TMA bursts
// repeat one shared-memory chunk, so they use burst 0 and word modulo the chunk).
// Linear in `word`: the sender adds the word index to word 0's value, which differs
// between the bursts of one SM, so a stale burst's payload fails the check.
XS_HD uint32_t probe_word(uint32_t epoch, uint32_t sm, uint32_t burst, uint32_t word) {
  return epoch * 0x9E3779B1u + sm * 0x85EBCA77u + burst * 0xC2B2AE3Du + word;
}

struct ProbeConfig {
  std::string pattern = "peer";  // local | peer | all_peers | host
  std::string store = "st16";    // st4 | st8 | st16 | tma
  std::string mode = "issue";    // issue | visible
  int sms = 132;
  std::size_t burst_bytes = 16384;  // per SM per burst
  double gap_ns = 0;
};

struct ProbeOptions {
  int gpus = 2;
  std::vector<ProbeConfig> configs;
  int warmup = 16;   // bursts run before measuring (rows record it; the model simulates them)
  int bursts = 64;   // measured bursts per SM
  std::size_t buffer_bytes = std::size_t{64} << 20;  // payload bytes per rank window
  bool copy_engine = true;  // time cudaMemcpyPeer 0 -> 1 as a reference
  // Each burst of an SM goes to the next burst-sized place of the SM's share of the
  // buffer (round robin): no store rewrites a line that may still be in the X-Stage, as
  // in the kernels, whose stores go to fresh rows. false: every burst rewrites one place
  // (a stage that merges rewrites of pending lines then drains less than was stored).
  bool fresh_addresses = true;
  bool progress = true;
};

struct ProbeResult {
  std::vector<SweepRow> rows;
  std::string card;
  int gpus = 0;
  int sm_count = 0;
  double copy_engine_GBps = -1;      // cudaMemcpyPeer 0 -> 1 (two GPUs or more)
  double copy_engine_d2h_GBps = -1;  // device to pinned host (runs with a host pattern)
  std::vector<double> clock_offset_ns;  // receiver r's clock minus rank 0's (index r)
  std::vector<double> ping_rtt_ns;      // fastest flag round trip 0 <-> r
  long long verified_words = 0;         // payload words checked bitwise
  bool fresh_addresses = false;         // ProbeOptions::fresh_addresses
};

// Throws common::Error before touching any GPU state for: more GPUs than present,
// a pattern needing peers on one GPU, sms above the SM count, burst not a positive
// multiple of 16, sms x burst larger than the buffer. Device waits time out with
// a message (XSTAGE_WAIT_TIMEOUT_MS).
ProbeResult run_probe(const ProbeOptions& opts);

// Into folder `out`: sweep.csv, probe_summary.json (card, GPUs, date, command, copy-engine
// bandwidth, clock offsets, verified words) and the raw sweep's plots; the rows as a
// table on stdout. Needs no GPU (xstage/probe/probe_report.cpp).
void write_results(const ProbeResult& res, const ProbeOptions& o, const std::filesystem::path& out,
                   const std::string& command);

// The sweep used to fit the model: patterns x SM counts x burst sizes x gaps for
// st16, plus store-kind and visible-mode subsets for peer and host. `quick` is a small
// subset. `patterns` empty: local, peer (2+ GPUs) and all_peers (3+); throws (one
// line) for a pattern that needs more GPUs than `gpus`.
std::vector<ProbeConfig> standard_sweep(int gpus, int sm_count, bool quick,
                                        const std::vector<std::string>& patterns = {});

}  // namespace xstage::probe
