// kernelkit CPU: cuda_runtime_api.h is provided by the prelude (kk_cpu.h).
#pragma once
