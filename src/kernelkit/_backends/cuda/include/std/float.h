// kernelkit (CUDA backend): <float.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
#include <cuda/std/cfloat>
#include "kk_cfloat.h"
#include "kk_std.h"
