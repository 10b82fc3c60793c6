// kernelkit (CUDA backend): <stddef.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
#include <cuda/std/cstddef>
#include "kk_std.h"
