#include "gait/train/adam.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

namespace gait::train {

namespace {

// The optimizer's state key for a parameter: LibTorch keys its state map by the
// TensorImpl's address, as a string before 2.1 and as the pointer since.
template <class Map>
typename Map::key_type state_key(const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;  // what c10::guts::to_string wrote: the address, as an ostream prints a pointer
    s << static_cast<const void*>(p.unsafeGetTensorImpl());
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

}  // namespace

torch::Tensor MultiTensorAdam::step(LossClosure closure) {
  for (const auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.amsgrad()) return torch::optim::Adam::step(std::move(closure));
    for (const auto& p : group.params())
      if (p.grad().defined() && p.grad().is_sparse()) return torch::optim::Adam::step(std::move(closure));
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  using Map = std::remove_reference_t<decltype(state_)>;
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<at::Scalar> sqrt_bc2, neg_step_size;  // per parameter: their step counts may differ
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto key = state_key<Map>(p);
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto s = std::make_unique<torch::optim::AdamParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(s)).first;
      }
      auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
      s.step(s.step() + 1);
      const double bc1 = 1 - std::pow(beta1, static_cast<double>(s.step()));
      const double bc2 = 1 - std::pow(beta2, static_cast<double>(s.step()));
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      sqrt_bc2.emplace_back(std::sqrt(bc2));
      neg_step_size.emplace_back(-o.lr() / bc1);
    }
    if (params.empty()) continue;
    // The per-parameter form's operations, in its order: g += wd p; m = b1 m + (1 - b1) g;
    // v = b2 v + (1 - b2) g^2; p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
    if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
    at::_foreach_mul_(exp_avgs, beta1);
    at::_foreach_add_(exp_avgs, grads, 1 - beta1);
    at::_foreach_mul_(exp_avg_sqs, beta2);
    at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);
    std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
    at::_foreach_div_(denom, sqrt_bc2);
    at::_foreach_add_(denom, o.eps());
    at::_foreach_addcdiv_(params, exp_avgs, denom, neg_step_size);
  }
  return loss;
}

}  // namespace gait::train
