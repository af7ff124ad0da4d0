/* The per-element function of counter_spec.py's dropout masks, for C, C++ and CUDA alike.
 *
 * For a mask read as a matrix (counter_spec.mask_columns) whose rows have `columns` elements: the keep
 * decision of element (row, column), from the keys (C, a, d1, d2, d3) and keep_level `level` alone, so
 * any kernel computes any element it holds without the others: the keyed-dropout op's CPU and CUDA kernels
 * (keyed_dropout.cpp) and the host loop of ../_counter_kernel.c.
 */
#ifndef LIBAI_EXT_COUNTER_HASH_H_
#define LIBAI_EXT_COUNTER_HASH_H_

#include <stdint.h>

#ifdef __CUDACC__
#define COUNTER_HASH_FN __host__ __device__ static inline
#else
#define COUNTER_HASH_FN static inline
#endif

/* counter_spec.HI_MULTIPLIERS[round]: a switch, since a host array is not readable on a device. */
COUNTER_HASH_FN uint32_t counter_hi_multiplier(int round) {
    return round == 0 ? 0x9E3779B1u : (round == 1 ? 0x85EBCA6Bu : 0xC2B2AE35u);
}

COUNTER_HASH_FN uint32_t counter_quadratic(uint32_t x, uint32_t d) { return x * (2u * x - d); }

/* The masks' R: x * 2**16 + trunc(signed(x) / 2**16); C's signed division truncates. */
COUNTER_HASH_FN uint32_t counter_rotate_trunc(uint32_t x) { return (x << 16) + (uint32_t)((int32_t)x / 65536); }

/* counter_spec.rotate_mix, the R of counter_spec.permute (every draw but the masks). */
COUNTER_HASH_FN uint32_t counter_rotate_mix(uint32_t x) { return ((x << 16) | (x >> 16)) - ((x >> 31) << 16); }

/* The rounds after A of the 32-bit word at a 64-bit index: counter_spec.permute (mix) or mask_permute. */
COUNTER_HASH_FN uint32_t counter_rounds(uint64_t index, const uint32_t keys[5], int mix) {
    uint32_t hi = (uint32_t)(index >> 32);
    uint32_t x = (uint32_t)index * keys[0] - keys[1];
    for (int round = 0; round < 3; round++) {
        x = counter_quadratic(mix ? counter_rotate_mix(x) : counter_rotate_trunc(x), keys[2 + round]);
        x -= hi * counter_hi_multiplier(round);
    }
    return x;
}

/* counter_spec.mask_permute: the 32-bit word a mask reads at a 64-bit word index. */
COUNTER_HASH_FN uint32_t counter_mask_permute(uint64_t index, const uint32_t keys[5]) {
    return counter_rounds(index, keys, 0);
}

/* counter_spec.keep: the half's 16 bits, sign bit flipped, at least `level`. */
COUNTER_HASH_FN int counter_keep_half(uint32_t word, int low, int level) {
    uint32_t half = low ? (word & 0xFFFFu) : (word >> 16);
    return (int)(half ^ 0x8000u) >= level;
}

/* counter_spec.mask_word + keep: whether element (row, column) of a mask whose rows hold `columns`
 * elements is kept.  Column c < ceil(columns/2) reads the high half of its row's word c, the others the
 * low half of word c - ceil(columns/2). */
COUNTER_HASH_FN int counter_keep(int64_t row, int64_t column, int64_t columns, const uint32_t keys[5],
                                 int level) {
    int64_t words = (columns + 1) / 2;
    int low = column >= words;
    int64_t word = row * words + (low ? column - words : column);
    return counter_keep_half(counter_mask_permute((uint64_t)word, keys), low, level);
}

#endif /* LIBAI_EXT_COUNTER_HASH_H_ */
