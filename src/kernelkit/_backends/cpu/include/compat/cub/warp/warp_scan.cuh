// kernelkit CPU backend: <cub/warp/warp_scan.cuh> (CUB's names over the CPU emulation; see kk_cub_block.cuh).
#pragma once
#include "../kk_cub_warp.cuh"
