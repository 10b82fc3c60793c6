// kernelkit (CUDA backend): <string.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
#include <cuda/std/cstring>
#include "kk_std.h"
