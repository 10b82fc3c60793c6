// kernelkit CPU: cooperative_groups/memcpy_async.h is provided by the prelude (kk_cpu.h).
#pragma once
