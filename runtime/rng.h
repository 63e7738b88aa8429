/* runtime/rng.h — the project's one pseudo-random generator: xoshiro256**
 * seeded through splitmix64, with the few distributions the runtime draws from
 * (weights init, augmentation, shuffling). Owns only the streams; must not
 * touch anything it is used for. Same seed, same numbers, on every machine. */
#ifndef YOLOCC_RNG_H
#define YOLOCC_RNG_H
#include <stdint.h>

typedef struct Rng {
    uint64_t s[4];
} Rng;

/* One splitmix64 step: advances *x and returns the mixed value. */
uint64_t rng_splitmix64(uint64_t *x);
/* Derives a well-spread 64-bit key from a key and one more value, so streams
 * keyed by (seed, epoch, position) are independent of each other. */
uint64_t rng_mix(uint64_t key, uint64_t v);
/* State = four successive splitmix64 outputs starting from seed. */
void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double rng_unit(Rng *r);
/* lo + (hi - lo) * unit: [lo, hi) like Python's random.uniform. */
double rng_uniform(Rng *r, double lo, double hi);
/* Uniform integer in [0, n), unbiased; 0 when n is 0. */
uint64_t rng_below(Rng *r, uint64_t n);
/* Standard normal by Box-Muller, one value per pair of uniforms. */
double rng_normal(Rng *r);
/* Gamma(shape, 1) for shape >= 1 (Marsaglia-Tsang); smaller shapes through
 * the boost Gamma(a) = Gamma(a + 1) * U^(1/a). */
double rng_gamma(Rng *r, double shape);
/* Beta(a, b) as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b). */
double rng_beta(Rng *r, double a, double b);

#endif
