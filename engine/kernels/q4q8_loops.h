/* The float loops of q4q8.c, one copy per instruction-set level: q4q8.c includes this file once per level with
 * COPY (the functions' target attribute, or nothing), NAME(f) (f's name in this copy), LEVEL (the `isa` that picks
 * it: 2, 1, 0), WIDE (whether the copy has AVX-512's 32 vector registers, to keep more running sums in flight) and,
 * where the level has a de-quantiser of its own, DEQUANTIZE; the copy ends in NAME(loops), the table q4q8.c's
 * entry points call through. Every copy does the same IEEE operations in the same order (q4q8.c says how), so the
 * copies differ in speed only. */

/* x (rows, K) float32 -> xq (rows, K) int8, dx and sx (rows, K / 32) float32, and isxh (rows, K / 16) int32 = Σ xq
 * over each half of a group. x / dx is rounded to the nearest integer, ties to even, by adding and subtracting
 * 1.5·2^23: plain IEEE additions, the same on every path. */
COPY static void NAME(q8_quantize)(const float *x, int64_t rows, int64_t K, int8_t *xq, float *dx, float *sx,
                                   int32_t *isxh) {
    int64_t groups = K / GROUP;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t g = 0; g < groups; g++) {
            const float *v = x + r * K + g * GROUP;
            float amax = 0.0f;
            for (int j = 0; j < GROUP; j++) amax = fmaxf(amax, fabsf(v[j]));
            float d = amax / 127.0f;
            float inv = d != 0.0f ? 1.0f / d : 0.0f;
            int32_t sums[2] = {0, 0};
            int8_t *q = xq + r * K + g * GROUP;
            for (int j = 0; j < GROUP; j++) {
                q[j] = (int8_t)((v[j] * inv + 12582912.0f) - 12582912.0f);
                sums[j / 16] += q[j];
            }
            dx[r * groups + g] = d;
            sx[r * groups + g] = d * (float)(sums[0] + sums[1]);
            isxh[2 * (r * groups + g)] = sums[0];
            isxh[2 * (r * groups + g) + 1] = sums[1];
        }
    }
}

#ifndef DEQUANTIZE
/* One block's group: inputs g·32.. of outputs b·16.., out pointing at (g·32, b·16), rows N apart. */
COPY static void NAME(dequantize)(const uint8_t *wb, const float *a, const float *bb, int four, int kind,
                                  int zero, uint16_t *out, int64_t N) {
    for (int i = 0; i < GROUP; i++) {
        /* input i: chunk c, byte j of each row's four (its low or high nibble, 4-bit) */
        int c = four ? (i % 16) / 4 : i / 4, j = i % 4, shift = four && i >= 16 ? 4 : 0;
        const float *scale = kind == SCALES_HALVES && i >= GROUP / 2 ? bb : a;
        for (int n = 0; n < ROWS; n++) {
            int byte = wb[c * 64 + 4 * n + j];
            float u = (float)((four ? (byte >> shift) & 0x0F : byte) - zero);
            out[i * N + n] = float_to_bf16(kind == SCALES_HALVES ? scale[n] * u : a[n] * u + bb[n]);
        }
    }
}
#define DEQUANTIZE NAME(dequantize)
#endif

/* p[j·capacity + t] = Σ_i queries[j][i] · keys_t[i·capacity + t] for t0 <= t < t0 + width (keys_t: (hd, capacity)
 * bfloat16, width <= SCORE_TILE); the tile's keys, widened once into floats, stay in L1 cache for all the queries. */
COPY static void NAME(score_tile)(const float *const *queries, int64_t count, const uint16_t *restrict keys_t,
                                  int64_t t0, int64_t width, int64_t hd, int64_t capacity, float *restrict p) {
    int64_t vectors = width / LANES;
    float tile[MAX_HEAD_DIM * SCORE_TILE];  /* (hd, SCORE_TILE) */
    for (int64_t i = 0; i < hd; i++) {
        const uint16_t *k = keys_t + i * capacity + t0;
        for (int64_t c = 0; c < vectors; c++) {
            sixteen v = load_bf16(k + LANES * c);
            memcpy(tile + i * SCORE_TILE + LANES * c, &v, sizeof v);
        }
        for (int64_t t = LANES * vectors; t < width; t++) tile[i * SCORE_TILE + t] = bf16_to_float(k[t]);
    }
    int64_t j = 0;
    if (width == SCORE_TILE) {
        if (WIDE)
            for (; j + SCORE_QUERIES <= count; j += SCORE_QUERIES)
                score_whole_tile(queries + j, SCORE_QUERIES, tile, hd, p + j * capacity, capacity, t0);
        for (; j < count; j++) score_whole_tile(queries + j, 1, tile, hd, p + j * capacity, capacity, t0);
    }
    for (; j < count; j++) {
        const float *q = queries[j];
        sixteen acc[SCORE_TILE / LANES] = {{0}};
        for (int64_t i = 0; i < hd; i++) {
            const float *k = tile + i * SCORE_TILE;
            for (int64_t c = 0; c < vectors; c++) acc[c] = fma16(q[i], load_sixteen(k + LANES * c), acc[c]);
        }
        memcpy(p + j * capacity + t0, acc, vectors * sizeof acc[0]);
        for (int64_t t = LANES * vectors; t < width; t++) {
            float sum = 0.0f;
            for (int64_t i = 0; i < hd; i++) sum = fmaf(q[i], tile[i * SCORE_TILE + t], sum);
            p[j * capacity + t0 + t] = sum;
        }
    }
}

/* p[t] ← e^(scale·p[t] − max) for t < end; returns 1 / their sum, taken as `dot` sums: in LANES lanes over t, then
 * a fixed tree (the maximum is the same in any order). */
COPY static float NAME(softmax_weights)(float *p, int64_t end, float scale) {
    float top[LANES], lanes[LANES] = {0};
    for (int l = 0; l < LANES; l++) top[l] = -INFINITY;
    int64_t t = 0;
    for (; t + LANES <= end; t += LANES)
        for (int l = 0; l < LANES; l++) {
            p[t + l] *= scale;
            top[l] = p[t + l] > top[l] ? p[t + l] : top[l];
        }
    for (; t < end; t++) {
        p[t] *= scale;
        top[t % LANES] = p[t] > top[t % LANES] ? p[t] : top[t % LANES];
    }
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) top[l] = top[l + width] > top[l] ? top[l + width] : top[l];
    for (t = 0; t + LANES <= end; t += LANES)
        for (int l = 0; l < LANES; l++) {
            p[t + l] = exp_approx(p[t + l] - top[0]);
            lanes[l] += p[t + l];
        }
    for (; t < end; t++) {
        p[t] = exp_approx(p[t] - top[0]);
        lanes[t % LANES] += p[t];
    }
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
    return 1.0f / lanes[0];
}

/* Up to WEIGHTED_QUERIES queries' weighted sums go on over positions from <= t < to, side by side: each value read
 * once for all of them, and G running sums in flight instead of a query's one, whose adds would wait on each other.
 * Each sum still adds its positions one by one in order of t, so every query gets the bits it would get alone.
 * AVX2's sixteen registers hold four queries' sums (two registers each) beside the value; AVX-512 takes eight. */
#define WEIGHTED_GROUP(G)                                                                                          \
    COPY static void NAME(weighted_##G)(const float *const *w, int64_t from, int64_t to,                          \
                                        const uint16_t *restrict values, int64_t hd, sixteen *sums) {           \
        sixteen s[G];                                                                                              \
        memcpy(s, sums, sizeof s);                                                                                 \
        for (int64_t t = from; t < to; t++) {                                                                      \
            sixteen v = load_bf16(values + t * hd);                                                                \
            _Pragma("GCC unroll 8") for (int k = 0; k < G; k++) s[k] = fma16(w[k][t], v, s[k]);                    \
        }                                                                                                          \
        memcpy(sums, s, sizeof s);                                                                                 \
    }
WEIGHTED_GROUP(1)
WEIGHTED_GROUP(2)
WEIGHTED_GROUP(3)
WEIGHTED_GROUP(4)
WEIGHTED_GROUP(5)
WEIGHTED_GROUP(6)
WEIGHTED_GROUP(7)
WEIGHTED_GROUP(8)
static const weighted_fn NAME(weighted)[WEIGHTED_QUERIES + 1] = {
    0, NAME(weighted_1), NAME(weighted_2), NAME(weighted_3), NAME(weighted_4), NAME(weighted_5), NAME(weighted_6),
    NAME(weighted_7), NAME(weighted_8)};

/* out[j][d0 + l] = inv[j] · Σ_{t < ends[j]} p[j·capacity + t] · values[t·hd + d0 + l] for l < LANES (values bfloat16:
 * (capacity, hd)): the positions every query of a group attends to side by side, then each query's own last ones. */
COPY static void NAME(weighted_tile)(const float *restrict p, int64_t count, const int64_t *ends, const float *inv,
                                     const uint16_t *restrict values, int64_t d0, int64_t hd, int64_t capacity,
                                     float *const *out) {
    int64_t most = WIDE ? WEIGHTED_QUERIES : WEIGHTED_QUERIES_AVX2;
    for (int64_t j0 = 0; j0 < count; j0 += most) {
        int64_t g = count - j0 < most ? count - j0 : most, shared = ends[j0];
        const float *w[WEIGHTED_QUERIES];
        sixteen sums[WEIGHTED_QUERIES] = {{0}};
        for (int64_t k = 0; k < g; k++) {
            w[k] = p + (j0 + k) * capacity;
            shared = ends[j0 + k] < shared ? ends[j0 + k] : shared;
        }
        NAME(weighted)[g](w, 0, shared, values + d0, hd, sums);
        for (int64_t k = 0; k < g; k++) {
            NAME(weighted_1)(w + k, shared, ends[j0 + k], values + d0, hd, sums + k);
            sums[k] *= inv[j0 + k];
            memcpy(out[j0 + k] + d0, &sums[k], sizeof sums[k]);
        }
    }
}

COPY static void NAME(add_into)(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

COPY static void NAME(silu_mul)(const float *gate_up, int64_t rows, int64_t I, float *out) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < I; i++) {
            float g = gate_up[r * 2 * I + i];
            out[r * I + i] = g / (1.0f + exp_approx(-g)) * gate_up[r * 2 * I + I + i];
        }
}

COPY static void NAME(rms_norm)(const float *x, const float *weight, int64_t rows, int64_t n, float eps, float *out) {
    for (int64_t r = 0; r < rows; r++) {
        float scale = 1.0f / sqrtf(sum_squares(x + r * n, n) / (float)n + eps);
        for (int64_t i = 0; i < n; i++) out[r * n + i] = weight[i] * (x[r * n + i] * scale);
    }
}

/* The level this copy was compiled for, reported by its own code (q4q8_loops_level). */
COPY static int NAME(level)(void) { return LEVEL; }

static const loops NAME(loops) = {NAME(level), NAME(q8_quantize), DEQUANTIZE, NAME(score_tile), NAME(softmax_weights),
                                  NAME(weighted_tile), NAME(add_into), NAME(silu_mul), NAME(rms_norm)};

#undef COPY
#undef NAME
#undef LEVEL
#undef WIDE
#undef DEQUANTIZE
