// Host helpers of the CUDA part of xstage/attention that need fmt (kept out of .cu files).
#include "xstage/attention_cuda.hpp"
#include "xstage/hopper/timeout_report.hpp"

namespace xstage::attention {

namespace {
// Mirrors sm90::WaitSite (sm90_flash_fwd.cuh).
const char* wait_site_name(int site) {
  switch (site) {
    case 1: return "Q full (consumer waits for the Q tile)";
    case 2: return "Q empty (producer waits for consumers to release Q)";
    case 3: return "K full (consumer waits for a K block)";
    case 4: return "K empty (producer waits for a K slot)";
    case 5: return "V full (consumer waits for a V block)";
    case 6: return "V empty (producer waits for a V slot)";
    case 7: return "MMA turn (pingpong: consumer waits for its turn to issue)";
    case 8: return "release agent (no new finished slice for twice the budget; parity = tiles released)";
    default: return "unknown";
  }
}
}  // namespace

std::string explain_device_failure() { return hopper::take_timeout_report(wait_site_name); }

}  // namespace xstage::attention
