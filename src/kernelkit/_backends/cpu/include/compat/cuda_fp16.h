// kernelkit CPU: cuda_fp16.h is provided by the prelude (kk_cpu.h).
#pragma once
