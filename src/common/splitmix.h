/* SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014): the
 * project's one small deterministic random stream, used by the sampler, the generated test model,
 * the benchmarks and the tests. Not for cryptography. Header-only, thread-safe (the state is the
 * caller's). */
#ifndef DCP_COMMON_SPLITMIX_H
#define DCP_COMMON_SPLITMIX_H

#include <stdint.h>

/* Advances *state by the golden-ratio increment and returns the next 64 random bits: the state
 * after the increment, through SplitMix64's mixing function. */
static inline uint64_t dcp_splitmix64_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
