// kernelkit (CUDA backend): <assert.h> under NVRTC, from libcu++ (see kk_std.h).
#pragma once
#include <cuda/std/cassert>
#include "kk_std.h"
#include "kk_assert.h"
