/* runtime/rng.c — xoshiro256** (Blackman & Vigna) and the distributions of
 * rng.h. Owns the bit-level stream; callers own what they key it with. Must
 * not change any value it produces: weights init and cached data depend on it. */
#include "rng.h"

#include <math.h>

uint64_t rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rng_mix(uint64_t key, uint64_t v) {
    /* two rounds so that nearby (key, v) pairs land far apart */
    uint64_t x = key ^ 0x6a09e667f3bcc909ull;
    uint64_t a = rng_splitmix64(&x);
    x = a ^ v;
    return rng_splitmix64(&x);
}

void rng_seed(Rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(Rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rng_unit(Rng *r) { return (double)(rng_u64(r) >> 11) * 0x1p-53; }

double rng_uniform(Rng *r, double lo, double hi) { return lo + (hi - lo) * rng_unit(r); }

uint64_t rng_below(Rng *r, uint64_t n) {
    if (n == 0) return 0;
    /* rejection of the short top range keeps every value equally likely */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng_u64(r);
    while (x >= limit);
    return x % n;
}

double rng_normal(Rng *r) {
    double u1 = 1.0 - rng_unit(r), u2 = rng_unit(r);   /* u1 in (0, 1]: log is finite */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double rng_gamma(Rng *r, double shape) {
    if (!(shape > 0)) return 0;
    if (shape < 1) {
        double u = 1.0 - rng_unit(r);
        return rng_gamma(r, shape + 1.0) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = 1.0 - rng_unit(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}

double rng_beta(Rng *r, double a, double b) {
    double x = rng_gamma(r, a), y = rng_gamma(r, b);
    return x + y > 0 ? x / (x + y) : 0.5;
}
