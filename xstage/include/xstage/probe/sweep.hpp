// The probe sweep: one row per burst configuration. This is the contract between
// the probe (GPU, writes it) and the Burst-Gap model (host, reads it).
//
// CSV columns, in this order (times in ns, sizes in bytes; -1 = not measured):
//   gpus          GPUs taking part in the run (sender + receivers)
//   pattern       local | peer | all_peers | host
//                 (own HBM; one peer; peers round-robin; mapped pinned host memory
//                 over the host link)
//   store         st4 | st8 | st16 | tma     (st.global width, or TMA bulk store)
//   mode          issue   : bursts back to back with compute gaps, no per-burst signal
//                 visible : each burst ends with a release flag the receiver observes
//   sms           issuing SMs (one block per SM)
//   burst_bytes   bytes per SM per burst
//   gap_ns        busy compute between bursts (requested)
//   bursts        bursts measured per SM (after `warmup` unmeasured bursts)
//   issue_ns_med, issue_ns_p10, issue_ns_p90
//                 sender-visible issue time of one burst on one SM (first store
//                 issued to last store issued, %globaltimer), over SMs x bursts
//   issue_ns_mean mean of the same (in the sustained regime the median understates
//                 the mean: SMs are served unfairly, so use the mean for rates)
//   period_ns_med, period_ns_mean
//                 start-to-start time of consecutive bursts on one SM (the real
//                 time between bursts is period - issue: it includes ~0.4 us of
//                 the kernel's own bookkeeping besides gap_ns)
//   gbps          aggregate injection rate: bytes whose issue ended inside the
//                 window where every SM is issuing (latest first start to earliest
//                 last end, %globaltimer), over that window's length
//   visible_ns_med, visible_ns_p10, visible_ns_p90
//                 burst start (sender) to the receiver seeing its release flag,
//                 converted to the sender's clock (visible mode only)
//   drain_ns_med  burst start to the sender's system-scope fence returning (visible mode;
//                 the only visible-mode column of host rows: no GPU observes host memory)
//   warmup        unmeasured bursts run first (the X-Stage starts empty, so a model
//                 of the row simulates bursts warmup+1 .. warmup+bursts); optional
//                 when reading (absent in the first sweeps: 8)
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace xstage {

struct SweepRow {
  int gpus = 2;
  std::string pattern = "peer";
  std::string store = "st16";
  std::string mode = "issue";
  int sms = 132;
  double burst_bytes = 16384;
  double gap_ns = 0;
  int bursts = 0;
  double issue_ns_med = -1, issue_ns_p10 = -1, issue_ns_p90 = -1;
  double issue_ns_mean = -1;
  double period_ns_med = -1, period_ns_mean = -1;
  double gbps = -1;
  double visible_ns_med = -1, visible_ns_p10 = -1, visible_ns_p90 = -1;
  double drain_ns_med = -1;
  int warmup = 8;
};

// Validates every field (known pattern/store/mode names, positive sizes, finite
// numbers); throws common::Error naming file and line.
std::vector<SweepRow> read_sweep_csv(const std::filesystem::path& path);
std::vector<SweepRow> parse_sweep_csv(const std::string& text, const std::string& source_name);
std::string format_sweep_csv(const std::vector<SweepRow>& rows);
void write_sweep_csv(const std::vector<SweepRow>& rows, const std::filesystem::path& path);  // atomic

bool is_valid_pattern(const std::string& s);
bool is_valid_store(const std::string& s);

}  // namespace xstage
