// kernelkit (CUDA backend): <math.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
// libcu++ defines INFINITY and NAN as numeric_limits constants: the prelude's give way to them.
#undef INFINITY
#undef NAN
#include <cuda/std/cmath>
#include "kk_std.h"
