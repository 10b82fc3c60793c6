// kernelkit CPU: cuda.h is provided by the prelude (kk_cpu.h).
#pragma once
