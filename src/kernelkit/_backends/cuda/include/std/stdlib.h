// kernelkit (CUDA backend): <stdlib.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
#include <cuda/std/cstdlib>
#include "kk_std.h"
