// Uses the installed gait library: builds the two-branch network of a training config
// (JSON, as `gait train --config` reads it), runs it on random inputs of the shapes the
// config describes and prints the embedding's shape and the parameter count.
//   cpp_gait <config.json>
#include <cstdio>
#include <exception>

#include "gait/nets/gait_net.hpp"
#include "gait/train/config.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cpp_gait <config.json>\n");
    return 2;
  }
  try {
    const gait::train::Config cfg = gait::train::load_config(argv[1]);
    gait::nets::GaitNet net(cfg.model, 8);
    net->eval();
    torch::NoGradGuard no_grad;
    // Silhouettes [n, frames, 64, 44] and COCO-17 poses [n, frames, 17, (x, y, score)].
    const int frames = cfg.data.clip_length;
    const auto sil = torch::rand({2, frames, 64, 44});
    const auto pose = torch::rand({2, frames, 17, 3});
    const auto out = net->forward(sil, pose);
    long long params = 0;
    for (const auto& p : net->parameters()) params += p.numel();
    std::printf("embedding [%lld, %lld, %lld], %lld parameters\n", (long long)out.embed.size(0),
                (long long)out.embed.size(1), (long long)out.embed.size(2), params);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_gait: %s\n", e.what());
    return 1;
  }
}
