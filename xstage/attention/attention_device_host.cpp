// Host helpers of the CUDA part of xstage/attention that need fmt (kept out of .cu files).
#include "xstage/attention/attention_cuda.hpp"
#include "xstage/sync/report.hpp"

namespace xstage::attention {

// The attention kernel's sites are registered by its launcher (kAttentionSites).
std::string explain_device_failure() { return sync::take_report(); }

}  // namespace xstage::attention
