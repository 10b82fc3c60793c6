// kernelkit (CUDA backend): <limits.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
#include <cuda/std/climits>
#include "kk_std.h"
