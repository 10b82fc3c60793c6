// kernelkit CPU: cooperative_groups/scan.h is provided by the prelude (kk_cpu.h).
#pragma once
