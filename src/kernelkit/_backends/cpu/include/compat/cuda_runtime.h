// kernelkit CPU: cuda_runtime.h is provided by the prelude (kk_cpu.h).
#pragma once
