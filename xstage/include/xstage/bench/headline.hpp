// The results files of docs/results that are put together from other outputs rather
// than written by one bench: probe.json (`xstage probe-results`) from probe folders, and
// host_link.json (`xstage host-link-results`) from a host-link probe folder and the fused
// kernels' host-link sweeps. A probe folder is what `xstage probe` and
// `xstage fit --holdout --report` leave: sweep.csv, probe_summary.json, params.json,
// report.json. Host code; every error is one line naming the file.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "xstage/bench/report.hpp"  // read_json_file

namespace xstage::bench {

// The headline figures of one probe folder on one link pattern: the backpressure ratio
// (all SMs x 16 KiB with no gap over the same with `recovery_gap_ns`, a gap that lets the
// link recover: 10 us on NVLink, 50 us on the host link) for st16 and every other store
// kind of the sweep, the model's held-out and smallest-free-gap errors, the sustained
// drain (all SMs, no gap, the largest burst), the copy engine's rates and the parameters.
nlohmann::json probe_run_figures(const std::filesystem::path& dir, const std::string& pattern,
                                 double recovery_gap_ns);

// probe.json: the first folder's NVLink figures (pattern "peer", 10 us) as the headline,
// and every folder's (e.g. two and four GPUs) under "runs".
nlohmann::json probe_results(const std::vector<std::filesystem::path>& dirs);

// host_link.json from what is given. A part not given (the probe, a sweep) is kept from
// the file being rewritten (`out`), so one sweep can be re-measured alone; without a
// probe folder that file must have a probe section.
struct HostLinkInputs {
  std::string probe_dir;         // `xstage probe --pattern host` folder, fitted
  std::string ulysses;           // `xstage bench ulysses --link host --json` results file
  std::vector<std::string> moe;  // `xstage bench moe --link host --json` files: rows together, a repeat from the later
  std::string png_dir;           // predicted-against-measured plots (needs PLplot); empty: none
  std::string out;               // the results file being rewritten
  int sms = 0;                   // SMs of the GPU that measured rows without their own `sms`
};
struct HostLinkResults {
  nlohmann::json json;
  std::vector<std::string> pngs;  // the plots written
};
// The sections, each fused-kernel section's rows re-predicted with this build's model
// (MoE time, Ulysses drain), the Ulysses rows' achievable bound, and the predicted
// speedup's median error over both sweeps' correct rows.
HostLinkResults host_link_results(const HostLinkInputs& in);

}  // namespace xstage::bench
