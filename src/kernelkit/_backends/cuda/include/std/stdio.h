// kernelkit (CUDA backend): <stdio.h> under NVRTC: device printf is an NVRTC builtin.
#pragma once
#include "kk_std.h"
namespace std {
using ::printf;
}
