// Entry point of the local attention forward pass: validate, pick the config,
// launch the sm_90a kernel with the local-store epilogue.
#include "xstage/attention/sm90_flash_fwd_launch.cuh"
#include "xstage/attention/attention_cuda.hpp"

namespace xstage::attention {

namespace {
void launch_local(const FwdArgs& args, const Problem& prob, const FwdConfig& cfg, cudaStream_t stream) {
  sm90::LocalStoreEpilogue::Params epi{};
  epi.o = static_cast<__nv_bfloat16*>(args.o.data);
  epi.stride_b = args.o.stride_b;
  epi.stride_s = args.o.stride_s;
  epi.stride_h = args.o.stride_h;
  epi.lse = args.lse;
  epi.lse_stride_h = prob.Sq;
  epi.lse_stride_b = prob.H * prob.Sq;
  sm90::launch_flash_fwd<sm90::LocalStoreEpilogue>(args, prob, cfg, epi, stream);
}
}  // namespace

FwdConfig flash_fwd(const FwdArgs& args, cudaStream_t stream, const FwdOptions& opt) {
  const Problem prob = validate(args);  // throws before any launch
  int dev = 0, sms = 0;
  XS_CHECK_CUDA(cudaGetDevice(&dev));
  XS_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const FwdConfig cfg = choose_config(prob, sms, opt);
  maybe_print_config(cfg);
  launch_local(args, prob, cfg, stream);
  return cfg;
}

void flash_fwd_with(const FwdArgs& args, const FwdConfig& cfg, cudaStream_t stream) {
  launch_local(args, validate(args), cfg, stream);
}

}  // namespace xstage::attention

