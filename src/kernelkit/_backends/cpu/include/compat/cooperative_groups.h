// kernelkit CPU: cooperative_groups.h is provided by the prelude (kk_cpu.h).
#pragma once
