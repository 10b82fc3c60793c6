// kernelkit CPU: cuda_bf16.h is provided by the prelude (kk_cpu.h).
#pragma once
