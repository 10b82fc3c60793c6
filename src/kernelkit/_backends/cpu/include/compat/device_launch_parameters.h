// kernelkit CPU: device_launch_parameters.h is provided by the prelude (kk_cpu.h).
#pragma once
