// The single LibTorch include of the gait code. Every torch translation unit is
// compiled against this header precompiled once (cmake/XsTorch.cmake,
// gait_torch_pch), so <torch/torch.h> is parsed once per build, not once per file.
// Only APIs present in both LibTorch 1.13 (Debian) and 2.x (PyTorch wheels) are used;
// the one that moved (autocast) is isolated in gait/train/amp.cpp.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>
