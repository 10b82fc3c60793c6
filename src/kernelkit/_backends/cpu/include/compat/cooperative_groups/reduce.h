// kernelkit CPU: cooperative_groups/reduce.h is provided by the prelude (kk_cpu.h).
#pragma once
