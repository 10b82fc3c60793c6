// kernelkit CPU backend: <cub/config.cuh> (CUB's names over the CPU emulation; see kk_cub_block.cuh).
#pragma once
#include "kk_cub_util.cuh"
