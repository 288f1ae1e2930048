#include "gait/train/adam.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

#include "common/check.hpp"

// at::_foreach_mul_ with one tensor scalar arrived in LibTorch 2.1; before it the scalar
// is repeated as a list (the per-tensor path, which nothing time-critical takes there).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define GAIT_FOREACH_TENSOR_SCALAR 1
#else
#define GAIT_FOREACH_TENSOR_SCALAR 0
#endif

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

// One group's parameters that have gradients, with their state (created at step 0).
struct GroupLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<torch::optim::AdamParamState*> states;
};

template <class Map>
GroupLists group_lists(Map& state, torch::optim::OptimizerParamGroup& group) {
  GroupLists l;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    const auto key = state_key<Map>(p);
    auto it = state.find(key);
    if (it == state.end()) {
      auto s = std::make_unique<torch::optim::AdamParamState>();
      s->step(0);
      s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      it = state.emplace(key, std::move(s)).first;
    }
    auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
    l.params.push_back(p);
    l.grads.push_back(p.grad());
    l.exp_avgs.push_back(s.exp_avg());
    l.exp_avg_sqs.push_back(s.exp_avg_sq());
    l.states.push_back(&s);
  }
  return l;
}

// The moments' update, in the per-parameter form's order: g += wd p; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2. Returns sqrt(v), the denominator before its bias correction.
std::vector<torch::Tensor> update_moments(GroupLists& l, const torch::optim::AdamOptions& o) {
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  std::vector<torch::Tensor> grads = l.grads;
  if (o.weight_decay() != 0) grads = at::_foreach_add(grads, l.params, o.weight_decay());
  at::_foreach_mul_(l.exp_avgs, beta1);
  at::_foreach_add_(l.exp_avgs, grads, 1 - beta1);
  at::_foreach_mul_(l.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(l.exp_avg_sqs, grads, grads, 1 - beta2);
  return at::_foreach_sqrt(l.exp_avg_sqs);
}

void foreach_mul_(std::vector<torch::Tensor>& list, const torch::Tensor& scalar) {
#if GAIT_FOREACH_TENSOR_SCALAR
  at::_foreach_mul_(list, scalar);
#else
  at::_foreach_mul_(list, std::vector<torch::Tensor>(list.size(), scalar));
#endif
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
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    GroupLists l = group_lists(state_, group);
    if (l.params.empty()) continue;
    std::vector<at::Scalar> sqrt_bc2, neg_step_size;  // per parameter: their step counts may differ
    for (auto* s : l.states) {
      s->step(s->step() + 1);
      sqrt_bc2.emplace_back(std::sqrt(1 - std::pow(beta2, static_cast<double>(s->step()))));
      neg_step_size.emplace_back(-o.lr() / (1 - std::pow(beta1, static_cast<double>(s->step()))));
    }
    // p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
    std::vector<torch::Tensor> denom = update_moments(l, o);
    at::_foreach_div_(denom, sqrt_bc2);
    at::_foreach_add_(denom, o.eps());
    at::_foreach_addcdiv_(l.params, l.exp_avgs, denom, neg_step_size);
  }
  return loss;
}

void MultiTensorAdam::advance() {
  scalars_.resize(param_groups_.size());
  for (std::size_t gi = 0; gi < param_groups_.size(); ++gi) {
    auto& group = param_groups_[gi];
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    XS_ASSERT(!o.amsgrad(), "MultiTensorAdam::advance: amsgrad is not supported in the split step");
    GroupLists l = group_lists(state_, group);
    XS_ASSERT(l.params.size() == group.params().size(),
              "MultiTensorAdam::advance: {} of the group's {} parameters have no gradient (the split step updates "
              "them all)", group.params().size() - l.params.size(), group.params().size());
    if (l.params.empty()) continue;
    const int64_t step = l.states[0]->step() + 1;
    for (auto* s : l.states) {
      XS_ASSERT(s->step() + 1 == step, "MultiTensorAdam::advance: the group's parameters are at different steps "
                "({} and {})", s->step(), step - 1);
      s->step(step);
    }
    const double bc1 = 1 - std::pow(std::get<0>(o.betas()), static_cast<double>(step));
    const double bc2 = 1 - std::pow(std::get<1>(o.betas()), static_cast<double>(step));
    const torch::Device dev = l.params[0].device();
    torch::Tensor host = torch::empty({2}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(dev.is_cuda()));
    host[0] = 1 / std::sqrt(bc2);
    host[1] = -bc1 / o.lr();
    if (!scalars_[gi].defined() || scalars_[gi].device() != dev)
      scalars_[gi] = torch::empty({2}, torch::TensorOptions().dtype(torch::kFloat).device(dev));
    scalars_[gi].copy_(host, /*non_blocking=*/true);  // pinned: stream-ordered before update()
  }
}

void MultiTensorAdam::update() {
  torch::NoGradGuard no_grad;
  XS_ASSERT(scalars_.size() == param_groups_.size(), "MultiTensorAdam::update without advance()");
  for (std::size_t gi = 0; gi < param_groups_.size(); ++gi) {
    auto& group = param_groups_[gi];
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    GroupLists l = group_lists(state_, group);
    if (l.params.empty()) continue;
    // p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), as p += m / (denom * (-bc1 / lr)).
    std::vector<torch::Tensor> denom = update_moments(l, o);
    foreach_mul_(denom, scalars_[gi][0]);
    at::_foreach_add_(denom, o.eps());
    foreach_mul_(denom, scalars_[gi][1]);
    at::_foreach_addcdiv_(l.params, l.exp_avgs, denom);
  }
}

}  // namespace gait::train
