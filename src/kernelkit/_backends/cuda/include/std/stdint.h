// kernelkit (CUDA backend): <stdint.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
#include <cuda/std/cstdint>
#include "kk_std.h"
