/* 4- and 8-bit weights times Q8 activations, the way llama.cpp multiplies a quantised model: integer dot products
 * over groups of 32 inputs, scaled in float32.
 *
 * Weights (N outputs x K inputs) come in blocks of 16 output rows, each with scales per (row, group of 32 inputs)
 * of one of three kinds (SCALES_* below): w = d·u + m with fp16 d, m (Q4_0, Q4_1, Q5_0, Q8_0: exact in fp16) or
 * float32 ones (the K-quants' d·sc and dmin·mn), or w = d_h·(u − zero) with a float32 scale per half of the group
 * (Q6_K's 16-input sub-blocks); u in 0..15 (4 bits) or 0..255 (8 bits). Activations are quantised per row and
 * group as llama.cpp's Q8_0 does: x ≈ dx·xq, xq = round(x / dx) in -127..127, dx = max|x| / 127. Each output
 * adds, per group in order, the float32 operations the kinds' comment gives: every path below (AVX-512 VNNI,
 * AVX2, portable C) computes exactly those in that order, so a row's output is the same bits whatever the
 * instruction set, the number of threads and the number of rows multiplied with it (batch invariance).
 *
 * Layout of a 4-bit block (16 rows, one group): 256 bytes = 4 chunks c of 64 bytes; byte 4n + j of chunk c holds
 * row n's input 4c + j in its low nibble and input 16 + 4c + j in its high one. An 8-bit block: 512 bytes = 8
 * chunks, byte 4n + j of chunk c is row n's input 4c + j. Scales: per block and group, 16 of a, then 16 of b.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define GROUP 32
#define ROWS 16      /* output rows per weight block */
#define MAX_CHUNK 8  /* activation rows multiplied at once against a weight block */

typedef uint16_t half;

static float half_to_float(half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000 | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_bf16(float f) { /* round to nearest even, as torch converts */
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7FFFFFFF) > 0x7F800000) return 0x7FC0;
    return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

/* The float loops (q4q8_loops.h: the activations' quantiser, the de-quantiser, attention, the norms and the gated
 * activation) are compiled once per instruction-set level, AVX-512, AVX2 (with FMA and F16C) and portable C, and
 * every entry point runs the copy its `isa` names, the level of the matrix paths below (q4q8.py's SPECDEC_ISA picks
 * it), so one machine can run the code any CPU would. Without contracted multiply-adds and with explicit lanes every
 * copy does the same IEEE operations in the same order. */
typedef struct {
    int (*level)(void);
    void (*q8_quantize)(const float *, int64_t, int64_t, int8_t *, float *, float *, int32_t *);
    void (*dequantize)(const uint8_t *, const float *, const float *, int, int, int, uint16_t *, int64_t);
    void (*score_tile)(const float *const *, int64_t, const uint16_t *, int64_t, int64_t, int64_t, int64_t, float *);
    float (*softmax_weights)(float *, int64_t, float);
    void (*weighted_tile)(const float *, int64_t, const int64_t *, const float *, const uint16_t *, int64_t, int64_t,
                          int64_t, float *const *);
    void (*add_into)(float *, const float *, int64_t);
    void (*silu_mul)(const float *, int64_t, int64_t, float *);
    void (*rms_norm)(const float *, const float *, int64_t, int64_t, float, float *);
} loops;

static const loops *loops_for(int isa);

/* Scale kinds: per block of 16 rows and group of 32 inputs, the block's scales hold two arrays a, b of 16 (one per
 * row), fp16 (64 bytes) or float32 (128 bytes). With I_h = Σ_{half h of the group} u·xq − zero·Σ_{half h} xq (an
 * exact integer) every path adds, in this order:
 *   SCALES_F16, SCALES_F32 (w = a·u + b, zero = 0): acc = fma(float(I_0 + I_1)·dx, a, acc); acc = fma(b, sx, acc)
 *   SCALES_HALVES (w = a·(u − zero) on inputs 0-15, b·(u − zero) on 16-31): acc = fma(float(I_0)·dx, a, acc);
 *                                                                          acc = fma(float(I_1)·dx, b, acc) */
#define SCALES_F16 0
#define SCALES_F32 1
#define SCALES_HALVES 2

static inline int64_t scale_bytes(int kind) { return kind == SCALES_F16 ? 64 : 128; }

static inline float scale_at(const uint8_t *s, int kind, int i) {
    if (kind == SCALES_F16) {
        half h;
        memcpy(&h, s + 2 * i, 2);
        return half_to_float(h);
    }
    float f;
    memcpy(&f, s + 4 * i, 4);
    return f;
}

/* ------------------------------------------------------------------------------------------- portable C path */

static void block_scalar(const uint8_t *w, const uint8_t *scales, int bits, int kind, int zero, int64_t groups,
                         const int8_t *xq, const float *dx, const float *sx, const int32_t *isxh, int64_t K,
                         int64_t rows, float *out, int64_t N) {
    int64_t block_bytes = bits == 4 ? 256 : 512;
    for (int64_t r = 0; r < rows; r++) {
        for (int n = 0; n < ROWS; n++) {
            float acc = 0.0f;
            for (int64_t g = 0; g < groups; g++) {
                const uint8_t *b = w + g * block_bytes;
                const int8_t *x = xq + r * K + g * GROUP;
                int64_t rg = r * groups + g;
                int32_t I[2] = {-zero * isxh[2 * rg], -zero * isxh[2 * rg + 1]};
                if (bits == 4) {
                    for (int c = 0; c < 4; c++)
                        for (int j = 0; j < 4; j++) {
                            uint8_t byte = b[c * 64 + 4 * n + j];
                            I[0] += (byte & 0x0F) * x[4 * c + j];
                            I[1] += (byte >> 4) * x[16 + 4 * c + j];
                        }
                } else {
                    for (int c = 0; c < 8; c++)
                        for (int j = 0; j < 4; j++) I[c / 4] += b[c * 64 + 4 * n + j] * x[4 * c + j];
                }
                const uint8_t *s = scales + g * scale_bytes(kind);
                float a = scale_at(s, kind, n), bb = scale_at(s, kind, ROWS + n);
                if (kind == SCALES_HALVES) {
                    acc = fmaf((float)I[0] * dx[rg], a, acc);
                    acc = fmaf((float)I[1] * dx[rg], bb, acc);
                } else {
                    acc = fmaf((float)(I[0] + I[1]) * dx[rg], a, acc);
                    acc = fmaf(bb, sx[rg], acc);
                }
            }
            out[r * N + n] = acc;
        }
    }
}

/* ------------------------------------------------------------------------------------------- AVX-512 VNNI path */
#if defined(__x86_64__)
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vnni")))

static inline AVX512 __attribute__((always_inline)) void
block_vnni(const uint8_t *w, const uint8_t *scales, int bits, int kind, int zero, int64_t groups, const int8_t *xq,
           const float *dx, const float *sx, const int32_t *isxh, int64_t K, int R, float *out, int64_t N) {
    __m512 acc[MAX_CHUNK];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int64_t g = 0; g < groups; g++) {
        /* chunks 0-3 are inputs 0-15 (4c..4c+3), chunks 4-7 inputs 16-31, in both layouts */
        __m512i u[8];
        if (bits == 4) {
            const uint8_t *b = w + g * 256;
            for (int c = 0; c < 4; c++) {
                __m512i packed = _mm512_loadu_si512((const void *)(b + 64 * c));
                u[c] = _mm512_and_si512(packed, low);
                u[4 + c] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
            }
        } else {
            const uint8_t *b = w + g * 512;
            for (int c = 0; c < 8; c++) u[c] = _mm512_loadu_si512((const void *)(b + 64 * c));
        }
        const uint8_t *s = scales + g * scale_bytes(kind);
        __m512 a, bb;
        if (kind == SCALES_F16) {
            a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)s));
            bb = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + 32)));
        } else {
            a = _mm512_loadu_ps(s);
            bb = _mm512_loadu_ps(s + 64);
        }
        for (int r = 0; r < R; r++) {
            const int8_t *x = xq + r * K + g * GROUP;
            int64_t rg = (int64_t)r * groups + g;
            __m512i I[2] = {_mm512_set1_epi32(-zero * isxh[2 * rg]), _mm512_set1_epi32(-zero * isxh[2 * rg + 1])};
            for (int c = 0; c < 8; c++) {
                int32_t four;
                memcpy(&four, x + 4 * c, 4);
                I[c / 4] = _mm512_dpbusd_epi32(I[c / 4], u[c], _mm512_set1_epi32(four));
            }
            __m512 scale = _mm512_set1_ps(dx[rg]);
            if (kind == SCALES_HALVES) {
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(I[0]), scale), a, acc[r]);
                acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(I[1]), scale), bb, acc[r]);
            } else {
                __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(I[0], I[1])), scale);
                acc[r] = _mm512_fmadd_ps(t, a, acc[r]);
                acc[r] = _mm512_fmadd_ps(bb, _mm512_set1_ps(sx[rg]), acc[r]);
            }
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * N, acc[r]);
}

#define VNNI_CHUNK(R)                                                                                       \
    static AVX512 void block_vnni_##R(const uint8_t *w, const uint8_t *s, int bits, int kind, int zero,    \
                                      int64_t groups, const int8_t *xq, const float *dx, const float *sx, \
                                      const int32_t *isxh, int64_t K, float *out, int64_t N) {            \
        block_vnni(w, s, bits, kind, zero, groups, xq, dx, sx, isxh, K, R, out, N);                      \
    }
VNNI_CHUNK(1) VNNI_CHUNK(2) VNNI_CHUNK(3) VNNI_CHUNK(4) VNNI_CHUNK(5) VNNI_CHUNK(6) VNNI_CHUNK(7) VNNI_CHUNK(8)

typedef void (*block_fn)(const uint8_t *, const uint8_t *, int, int, int, int64_t, const int8_t *, const float *,
                         const float *, const int32_t *, int64_t, float *, int64_t);
static const block_fn VNNI[MAX_CHUNK + 1] = {0, block_vnni_1, block_vnni_2, block_vnni_3, block_vnni_4,
                                             block_vnni_5, block_vnni_6, block_vnni_7, block_vnni_8};

/* ------------------------------------------------------------------------------------------- AVX2 path */
/* Without VNNI: u8 x s8 pairs summed to int16 (maddubs), then to int32. 4-bit values fit (2·15·127); 8-bit ones
 * would overflow, so they multiply as signed q = u − 128 (|q| times x with q's sign) and Σ u·x = Σ q·x + 128·Σ x:
 * the same integers as the other paths, hence the same bits. A block's 16 rows are two registers of 8. */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

static inline AVX2 __attribute__((always_inline)) void
block_avx2(const uint8_t *w, const uint8_t *scales, int bits, int kind, int zero, int64_t groups, const int8_t *xq,
           const float *dx, const float *sx, const int32_t *isxh, int64_t K, int R, float *out, int64_t N) {
    __m256 acc[MAX_CHUNK][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const __m256i low = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    const int32_t shift = (bits == 8 ? 128 : 0) - zero;
    for (int64_t g = 0; g < groups; g++) {
        __m256i u[8][2];
        if (bits == 4) {
            const uint8_t *b = w + g * 256;
            for (int c = 0; c < 4; c++)
                for (int h = 0; h < 2; h++) {
                    __m256i packed = _mm256_loadu_si256((const __m256i *)(b + 64 * c + 32 * h));
                    u[c][h] = _mm256_and_si256(packed, low);
                    u[4 + c][h] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
                }
        } else {
            const uint8_t *b = w + g * 512;
            for (int c = 0; c < 8; c++)
                for (int h = 0; h < 2; h++)
                    u[c][h] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + 64 * c + 32 * h)), flip);
        }
        const uint8_t *s = scales + g * scale_bytes(kind);
        __m256 a[2], bb[2];
        for (int h = 0; h < 2; h++) {
            if (kind == SCALES_F16) {
                a[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 16 * h)));
                bb[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 32 + 16 * h)));
            } else {
                a[h] = _mm256_loadu_ps((const float *)(s + 32 * h));
                bb[h] = _mm256_loadu_ps((const float *)(s + 64 + 32 * h));
            }
        }
        for (int r = 0; r < R; r++) {
            const int8_t *x = xq + r * K + g * GROUP;
            int64_t rg = (int64_t)r * groups + g;
            __m256i I[2][2];  /* (input half, row half) */
            for (int i = 0; i < 2; i++)
                I[i][0] = I[i][1] = _mm256_set1_epi32(shift * isxh[2 * rg + i]);
            for (int c = 0; c < 8; c++) {
                int32_t four;
                memcpy(&four, x + 4 * c, 4);
                __m256i xb = _mm256_set1_epi32(four);
                for (int h = 0; h < 2; h++) {
                    __m256i pairs = bits == 4 ? _mm256_maddubs_epi16(u[c][h], xb)
                                              : _mm256_maddubs_epi16(_mm256_sign_epi8(u[c][h], u[c][h]),
                                                                     _mm256_sign_epi8(xb, u[c][h]));
                    I[c / 4][h] = _mm256_add_epi32(I[c / 4][h], _mm256_madd_epi16(pairs, ones));
                }
            }
            __m256 scale = _mm256_set1_ps(dx[rg]);
            for (int h = 0; h < 2; h++) {
                if (kind == SCALES_HALVES) {
                    acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I[0][h]), scale), a[h], acc[r][h]);
                    acc[r][h] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I[1][h]), scale), bb[h], acc[r][h]);
                } else {
                    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(I[0][h], I[1][h])), scale);
                    acc[r][h] = _mm256_fmadd_ps(t, a[h], acc[r][h]);
                    acc[r][h] = _mm256_fmadd_ps(bb[h], _mm256_set1_ps(sx[rg]), acc[r][h]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(out + r * N, acc[r][0]);
        _mm256_storeu_ps(out + r * N + 8, acc[r][1]);
    }
}

#define AVX2_CHUNK(R)                                                                                       \
    static AVX2 void block_avx2_##R(const uint8_t *w, const uint8_t *s, int bits, int kind, int zero,      \
                                    int64_t groups, const int8_t *xq, const float *dx, const float *sx,   \
                                    const int32_t *isxh, int64_t K, float *out, int64_t N) {              \
        block_avx2(w, s, bits, kind, zero, groups, xq, dx, sx, isxh, K, R, out, N);                      \
    }
AVX2_CHUNK(1) AVX2_CHUNK(2) AVX2_CHUNK(3) AVX2_CHUNK(4) AVX2_CHUNK(5) AVX2_CHUNK(6) AVX2_CHUNK(7) AVX2_CHUNK(8)

static const block_fn AVX2_BLOCKS[MAX_CHUNK + 1] = {0, block_avx2_1, block_avx2_2, block_avx2_3, block_avx2_4,
                                                    block_avx2_5, block_avx2_6, block_avx2_7, block_avx2_8};
#endif

/* Which path runs: 2 = AVX-512 VNNI, 1 = AVX2, 0 = portable C. */
int q4q8_best_isa(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return 1;
#endif
    return 0;
}

/* One weight: N outputs x K inputs in blocks of 16 rows (see the layout above), its scales of `kind`. */
typedef struct {
    const uint8_t *blocks;
    const uint8_t *scales;
    int64_t bits, N, K, kind, zero;
} qweight;

static int64_t q8_scratch_bytes(int64_t rows, int64_t K) { return rows * K + 4 * rows * (K / GROUP) * 4 + 64; }

/* x (rows, K) float32 quantised as Q8 (q4q8_loops.h's q8_quantize), laid out in a scratch buffer of
 * q8_scratch_bytes. */
typedef struct {
    int8_t *xq;
    float *dx, *sx;
    int32_t *isxh;
} q8_rows;

static q8_rows q8_rows_of(const float *x, int64_t rows, int64_t K, uint8_t *scratch, int isa) {
    int64_t groups = K / GROUP;
    q8_rows q;
    q.dx = (float *)scratch;
    q.sx = q.dx + rows * groups;
    q.isxh = (int32_t *)(q.sx + rows * groups);
    q.xq = (int8_t *)(q.isxh + 2 * rows * groups);
    loops_for(isa)->q8_quantize(x, rows, K, q.xq, q.dx, q.sx, q.isxh);
    return q;
}

/* out (rows, N) float32, rows `ldo` floats apart, = the quantised rows `q` (K wide) times w. `threads` OpenMP
 * threads split the weight blocks, so a row's result does not depend on them. */
static void q4q8_multiply(const qweight *w, const q8_rows *q, int64_t rows, float *out, int64_t ldo, int isa,
                          int threads) {
    int64_t K = w->K, groups = K / GROUP, blocks = w->N / ROWS;
    int64_t block_bytes = groups * (w->bits == 4 ? 256 : 512), block_scale_bytes = groups * scale_bytes((int)w->kind);
    int bits = (int)w->bits, kind = (int)w->kind, zero = (int)w->zero;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *wb = w->blocks + b * block_bytes;
        const uint8_t *sb = w->scales + b * block_scale_bytes;
        for (int64_t r0 = 0; r0 < rows; r0 += MAX_CHUNK) {
            int64_t R = rows - r0 < MAX_CHUNK ? rows - r0 : MAX_CHUNK;
            const int8_t *xr = q->xq + r0 * K;
            const float *dx = q->dx + r0 * groups, *sx = q->sx + r0 * groups;
            const int32_t *isxh = q->isxh + 2 * r0 * groups;
            float *o = out + r0 * ldo + b * ROWS;
#if defined(__x86_64__)
            if (isa == 2 || isa == 1) {
                (isa == 2 ? VNNI : AVX2_BLOCKS)[R](wb, sb, bits, kind, zero, groups, xr, dx, sx, isxh, K, o, ldo);
                continue;
            }
#endif
            block_scalar(wb, sb, bits, kind, zero, groups, xr, dx, sx, isxh, K, R, o, ldo);
        }
    }
}

/* out (rows, N) float32 = x (rows, K) float32 times w, rows packed. */
static void q4q8_run(const qweight *w, const float *x, int64_t rows, float *out, uint8_t *scratch, int isa,
                     int threads) {
    q8_rows q = q8_rows_of(x, rows, w->K, scratch, isa);
    q4q8_multiply(w, &q, rows, out, w->N, isa, threads);
}

/* Bytes of scratch q4q8_linear needs for `rows` rows of width K into N outputs. */
int64_t q4q8_scratch_bytes(int64_t rows, int64_t K, int64_t N) { return q8_scratch_bytes(rows, K) + rows * N * 4 + rows * K * 4; }

/* One projection as a torch op would do it: x and out float32 (bf16 = 0) or bfloat16 (bf16 = 1). */
void q4q8_linear(const qweight *w, const void *x, int bf16, int64_t rows, void *out, uint8_t *scratch, int isa,
                 int threads) {
    float *x32 = (float *)x, *o32 = (float *)out;
    uint8_t *rest = scratch;
    if (bf16) {
        x32 = (float *)scratch;
        o32 = x32 + rows * w->K;
        rest = (uint8_t *)(o32 + rows * w->N);
        for (int64_t i = 0; i < rows * w->K; i++) x32[i] = bf16_to_float(((const uint16_t *)x)[i]);
    }
    q4q8_run(w, x32, rows, o32, rest, isa, threads);
    if (bf16)
        for (int64_t i = 0; i < rows * w->N; i++) ((uint16_t *)out)[i] = float_to_bf16(o32[i]);
}

/* ------------------------------------------------------------------------------------------- de-quantising */
/* A weight de-quantised and transposed into out (K, N) bfloat16, rows `ldo` apart: the weights as a matrix-product library
 * multiplies them (a prompt's read-in, where one product over many rows beats the kernel's blocks of MAX_CHUNK).
 * Each value is the one the kernel's integers and scales stand for, a·(u − zero) + b (or the half group's scale
 * alone), a product and a sum each rounded to float32, then rounded once to bfloat16 (to nearest, ties to even):
 * the same bits on every path. Transposed, a block's 16 rows of one input are 16 neighbours. */

/* One block's group: inputs g·32.. of outputs b·16.., out pointing at (g·32, b·16), rows N apart; the other levels'
 * copies are q4q8_loops.h's dequantize. */
#if defined(__x86_64__)
static AVX512 void dequantize_avx512(const uint8_t *wb, const float *a, const float *bb, int four, int kind,
                                     int zero, uint16_t *out, int64_t N) {
    __m512 va = _mm512_loadu_ps(a), vb = _mm512_loadu_ps(bb);
    __m512i vzero = _mm512_set1_epi32(zero), byte_mask = _mm512_set1_epi32(four ? 0x0F : 0xFF);
    for (int i = 0; i < GROUP; i += 4) {
        int c = four ? (i % 16) / 4 : i / 4, shift = four && i >= 16 ? 4 : 0;
        __m512i chunk = _mm512_loadu_si512((const void *)(wb + c * 64));  /* row n's 4 bytes in lane n */
        __m512 scale = kind == SCALES_HALVES && i >= GROUP / 2 ? vb : va;
        for (int j = 0; j < 4; j++) {
            __m512i u = _mm512_and_si512(_mm512_srli_epi32(chunk, 8 * j + shift), byte_mask);
            __m512 value = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_sub_epi32(u, vzero)));
            if (kind != SCALES_HALVES) value = _mm512_add_ps(value, vb);
            /* to bfloat16, to nearest, ties to even: float_to_bf16's integer rounding */
            __m512i bits = _mm512_castps_si512(value);
            __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
            bits = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
            _mm256_storeu_si256((__m256i *)(out + (i + j) * N), _mm512_cvtepi32_epi16(bits));
        }
    }
}
#endif

void q4q8_dequantize(const qweight *w, uint16_t *out, int64_t ldo, int isa, int threads) {
    int64_t groups = w->K / GROUP, blocks = w->N / ROWS;
    int64_t group_bytes = w->bits == 4 ? 256 : 512, sbytes = scale_bytes((int)w->kind);
    int kind = (int)w->kind, zero = (int)w->zero, four = w->bits == 4;
    const loops *f = loops_for(isa);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; b++) {
        for (int64_t g = 0; g < groups; g++) {
            const uint8_t *s = w->scales + (b * groups + g) * sbytes;
            float a[ROWS], bb[ROWS];
            for (int n = 0; n < ROWS; n++) {
                a[n] = scale_at(s, kind, n);
                bb[n] = scale_at(s, kind, ROWS + n);
            }
            const uint8_t *wb = w->blocks + (b * groups + g) * group_bytes;
            uint16_t *o = out + g * GROUP * ldo + b * ROWS;
            f->dequantize(wb, a, bb, four, kind, zero, o, ldo);
        }
    }
}

/* ------------------------------------------------------------------------------------------- a whole forward */

/* A Llama-family decoder on these weights, everything in float32 (the native target's forward, fast_llama.py
 * describes the model). Each row's result is computed by one fixed sequence of operations, whatever the other
 * rows and the thread count: sums run over fixed lanes of 16 in input order, attention one (row, head) at a time. */
typedef struct {
    int64_t layers, hidden, heads, kv_heads, head_dim, intermediate;
    float eps;
    /* per layer: q, k, v as one weight or as parts (Q4_K_M files mix types), then o, gate and up likewise, down */
    const qweight *qkv, *gate_up;            /* layer i's parts are [first[i], first[i + 1]) */
    const int64_t *qkv_first, *gate_up_first;
    const qweight *o, *down;                 /* one per layer */
    const float *qkv_bias;                  /* (layers, q + k + v outputs), or NULL (Qwen2 has them) */
    const float *attn_norm, *mlp_norm;      /* (layers, hidden) */
    const float *final_norm;                /* (hidden) */
    const qweight *head;
    const float *q_norm, *k_norm;           /* (layers, head_dim): each head's q and k RMS-normed, or NULL (Qwen3) */
} llama;

#define LANES 16

/* Σ a·b in LANES lanes over the input, then a fixed pairwise tree over the lanes. */
static inline float dot(const float *a, const float *b, int64_t n) {
    float lanes[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) lanes[l] += a[i + l] * b[i + l];
    for (; i < n; i++) lanes[i % LANES] += a[i] * b[i];
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];
    return lanes[0];
}

static inline float sum_squares(const float *x, int64_t n) { return dot(x, x, n); }

/* e^x from IEEE additions and multiplications alone (Cody-Waite reduction, a degree-6 polynomial, ~2 ulp), so
 * that it vectorises and gives the same bits in every clone; libm's expf is a scalar call. */
static inline float exp_approx(float x) {
    x = x > -87.0f ? x : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { int32_t bits; float value; } scale = {((int32_t)n + 127) << 23};
    return p * scale.value;
}

#define MAX_GROUP 16  /* query heads per kv head */
#define MAX_HEAD_DIM 256
#define BLOCK_ROWS 8  /* rows whose attention reads each key and value once for all of them */
#define MAX_QUERIES (BLOCK_ROWS * MAX_GROUP)

/* Attention one kv head at a time for a block of rows: queries[j] (hd floats) is the j-th of `count` query vectors
 * that share the kv head, row j / group of the block; ends[j] is how many positions that query sees. Every score is
 * a dot product over head_dim in order, every output a sum over positions in order, whatever the other queries,
 * the tiles and the threads: a row gets the same bits in a block as in a step of its own. Tiles of SCORE_TILE
 * positions (of LANES outputs for the weighted sums) let each key and value be read once for all the queries while
 * the compiler vectorises the lanes. */

/* Sixteen floats as one value (GCC's and Clang's vector extension): each clone keeps them in its registers (one
 * AVX-512 register, two AVX2 ones, four SSE ones) and does the same IEEE operation in every lane. */
typedef float sixteen __attribute__((vector_size(64)));

static inline sixteen load_sixteen(const float *p) {
    sixteen v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* a·b + c in every lane, rounded once (fmaf): one instruction in the AVX-512 and AVX2 clones, whose adds would
 * otherwise take a port each beside their multiplies; the default clone calls libm's fmaf, with the same bits. */
static inline __attribute__((always_inline)) sixteen fma16(float a, sixteen b, sixteen c) {
    sixteen r;
    for (int l = 0; l < LANES; l++) r[l] = fmaf(a, b[l], c[l]);
    return r;
}

typedef uint16_t sixteen_bf16 __attribute__((vector_size(32)));
typedef uint32_t sixteen_bits __attribute__((vector_size(64)));

/* Sixteen cached bfloat16 values as floats: exact, a widening and a shift on every path. */
static inline sixteen load_bf16(const uint16_t *p) {
    sixteen_bf16 h;
    memcpy(&h, p, sizeof h);
    sixteen_bits bits = __builtin_convertvector(h, sixteen_bits) << 16;
    sixteen v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

#define SCORE_TILE 64  /* positions a score task takes: 4 cache lines of each key row, read in turn */
#define SCORE_QUERIES 2  /* queries scored side by side over a whole tile, in the AVX-512 copy */

/* G queries' scores over a whole tile (SCORE_TILE positions of `tile`, widened keys): G·SCORE_TILE/LANES running
 * sums in registers, each query's still adding the head's dimensions in order. A count known when compiling keeps
 * them out of memory (a sum stored and reloaded every step waits on it), and two queries side by side keep enough
 * multiply-adds in flight to fill an AVX-512 core; AVX2's sixteen registers hold one query's. */
static inline __attribute__((always_inline)) void score_whole_tile(const float *const *queries, int G,
                                                                   const float *tile, int64_t hd, float *p,
                                                                   int64_t capacity, int64_t t0) {
    sixteen acc[SCORE_QUERIES][SCORE_TILE / LANES] = {{{0}}};
    for (int64_t i = 0; i < hd; i++)
        _Pragma("GCC unroll 4") for (int c = 0; c < SCORE_TILE / LANES; c++) {
            sixteen key = load_sixteen(tile + i * SCORE_TILE + LANES * c);
            _Pragma("GCC unroll 2") for (int g = 0; g < G; g++) acc[g][c] = fma16(queries[g][i], key, acc[g][c]);
        }
    for (int g = 0; g < G; g++) memcpy(p + g * capacity + t0, acc[g], sizeof acc[g]);
}

/* Up to WEIGHTED_QUERIES queries' weighted sums side by side (q4q8_loops.h's weighted_tile); AVX2's sixteen
 * registers hold WEIGHTED_QUERIES_AVX2. */
#define WEIGHTED_QUERIES 8
#define WEIGHTED_QUERIES_AVX2 4
typedef void (*weighted_fn)(const float *const *, int64_t, int64_t, const uint16_t *, int64_t, sixteen *);

#if defined(__x86_64__)
#define COPY AVX512
#define NAME(f) f##_avx512
#define LEVEL 2
#define WIDE 1
#define DEQUANTIZE dequantize_avx512
#include "q4q8_loops.h"

#define COPY AVX2
#define NAME(f) f##_avx2
#define LEVEL 1
#define WIDE 0
#include "q4q8_loops.h"
#endif

#define COPY
#define NAME(f) f##_portable
#define LEVEL 0
#define WIDE 0
#include "q4q8_loops.h"

static const loops *loops_for(int isa) {
#if defined(__x86_64__)
    static const loops *const by_isa[] = {&loops_portable, &loops_avx2, &loops_avx512};
    return by_isa[isa];
#else
    return &loops_portable;
#endif
}

/* The level of the float loops' copy that `isa` runs, as that copy's own code reports it. */
int q4q8_loops_level(int isa) { return loops_for(isa)->level(); }

/* attn (rows, heads·hd) ← attention of the queries in qkv (rows of wqkv floats, heads first) at positions start..
 * over one layer's cache: keys_t (kv_heads, hd, capacity), values (kv_heads, capacity, hd), both bfloat16. scores: scratch of
 * BLOCK_ROWS · heads · capacity floats. head_dim is a multiple of LANES (fast_llama checks). */
static void attention(const loops *f, const llama *m, const float *qkv, int64_t wqkv, int64_t rows, int64_t start,
                      const uint16_t *keys_t, const uint16_t *values, int64_t capacity, float *scores, float *attn,
                      int threads) {
    int64_t hd = m->head_dim, heads = m->heads, group = heads / m->kv_heads, nq = heads * hd;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r0 = 0; r0 < rows; r0 += BLOCK_ROWS) {
        int64_t n = rows - r0 < BLOCK_ROWS ? rows - r0 : BLOCK_ROWS, count = n * group;
        int64_t last = start + r0 + n, tiles = (last + SCORE_TILE - 1) / SCORE_TILE, chunks = hd / LANES;
        int64_t ends[MAX_QUERIES];  /* query j is row j / group of the block, head kv·group + j % group */
        float inv[BLOCK_ROWS * m->heads];
        for (int64_t j = 0; j < count; j++) ends[j] = start + r0 + j / group + 1;
#pragma omp parallel num_threads(threads)
        {
            const float *queries[MAX_QUERIES];
            float *outs[MAX_QUERIES];
#pragma omp for schedule(static)
            for (int64_t task = 0; task < m->kv_heads * tiles; task++) {
                int64_t kv = task / tiles, t0 = task % tiles * SCORE_TILE;
                for (int64_t j = 0; j < count; j++)
                    queries[j] = qkv + (r0 + j / group) * wqkv + (kv * group + j % group) * hd;
                int64_t width = last - t0 < SCORE_TILE ? last - t0 : SCORE_TILE;
                f->score_tile(queries, count, keys_t + kv * hd * capacity, t0, width, hd, capacity,
                           scores + kv * count * capacity);
            }
#pragma omp for schedule(static)
            for (int64_t task = 0; task < m->kv_heads * count; task++)
                inv[task] = f->softmax_weights(scores + task * capacity, ends[task % count], scale);
#pragma omp for schedule(static)
            for (int64_t task = 0; task < m->kv_heads * chunks; task++) {
                int64_t kv = task / chunks;
                for (int64_t j = 0; j < count; j++) outs[j] = attn + (r0 + j / group) * nq + (kv * group + j % group) * hd;
                f->weighted_tile(scores + kv * count * capacity, count, ends, inv + kv * count, values + kv * capacity * hd,
                              task % chunks * LANES, hd, capacity, outs);
            }
        }
    }
}

/* The forward's own norm and gated activation, for a caller that multiplies the weights elsewhere (read_in). */
void llama_rms_norm(const float *x, const float *weight, int64_t rows, int64_t n, float eps, float *out, int isa) {
    loops_for(isa)->rms_norm(x, weight, rows, n, eps, out);
}

void llama_silu_mul(const float *gate_up, int64_t rows, int64_t I, float *out, int isa) {
    loops_for(isa)->silu_mul(gate_up, rows, I, out);
}

/* HF's rotate-half RoPE on one head vector at one position's cos / sin (head_dim each). */
static void rope(float *v, const float *cos, const float *sin, int64_t head_dim) {
    int64_t half_dim = head_dim / 2;
    for (int64_t i = 0; i < half_dim; i++) {
        float a = v[i], b = v[i + half_dim];
        v[i] = a * cos[i] - b * sin[i];
        v[i + half_dim] = b * cos[i + half_dim] + a * sin[i + half_dim];
    }
}

/* Layer `layer`'s parts of a projection, side by side in out (rows of `width`): x is quantised once for all. */
static void run_parts(const qweight *parts, const int64_t *first, int64_t layer, const float *x, int64_t rows,
                      float *out, int64_t width, uint8_t *scratch, int isa, int threads) {
    q8_rows q = q8_rows_of(x, rows, parts[first[layer]].K, scratch, isa);
    int64_t column = 0;
    for (int64_t p = first[layer]; p < first[layer + 1]; p++) {
        q4q8_multiply(&parts[p], &q, rows, out + column, width, isa, threads);
        column += parts[p].N;
    }
}

int64_t llama_scratch_bytes(const llama *m, int64_t rows, int64_t capacity) {
    int64_t qkv = (m->heads + 2 * m->kv_heads) * m->head_dim, widest = m->hidden;
    if (m->intermediate > widest) widest = m->intermediate;
    int64_t floats = rows * (m->hidden + qkv + m->heads * m->head_dim + 2 * m->intermediate + m->intermediate) +
                     BLOCK_ROWS * m->heads * capacity;
    return floats * 4 + q8_scratch_bytes(rows, widest) + 256;
}

/* Layer `layer`'s q, k and v of `rows` rows at positions start.. in qkv (rows of q, k, v outputs, changed in place)
 * get the bias, the heads' norms and RoPE, and the keys and values go into the caches (see llama_forward). */
void llama_place(const llama *m, int64_t layer, float *qkv, int64_t rows, int64_t start, uint16_t *kcache,
                 uint16_t *vcache, int64_t capacity, const float *cos, const float *sin, int isa) {
    int64_t hd = m->head_dim, nq = m->heads * hd, nkv = m->kv_heads * hd, wqkv = nq + 2 * nkv;
    uint16_t *kc = kcache + layer * m->kv_heads * capacity * hd, *vc = vcache + layer * m->kv_heads * capacity * hd;
    for (int64_t r = 0; r < rows; r++) {
        float *row = qkv + r * wqkv;
        if (m->qkv_bias)
            for (int64_t i = 0; i < wqkv; i++) row[i] += m->qkv_bias[layer * wqkv + i];
        if (m->q_norm) {  /* each head a row of head_dim, in place */
            loops_for(isa)->rms_norm(row, m->q_norm + layer * hd, m->heads, hd, m->eps, row);
            loops_for(isa)->rms_norm(row + nq, m->k_norm + layer * hd, m->kv_heads, hd, m->eps, row + nq);
        }
        const float *c = cos + (start + r) * hd, *s = sin + (start + r) * hd;
        for (int64_t head = 0; head < m->heads + m->kv_heads; head++) rope(row + head * hd, c, s, hd);
        for (int64_t kvh = 0; kvh < m->kv_heads; kvh++)
            for (int64_t i = 0; i < hd; i++) {
                kc[(kvh * hd + i) * capacity + start + r] = float_to_bf16(row[nq + kvh * hd + i]);
                vc[(kvh * capacity + start + r) * hd + i] = float_to_bf16(row[nq + nkv + kvh * hd + i]);
            }
    }
}

/* x (rows, hidden) float32: the embeddings of `rows` tokens at positions start.., changed in place. The keys of
 * every layer go to kcache (layers, kv_heads, head_dim, capacity), transposed, and the values to vcache (layers,
 * kv_heads, capacity, head_dim), at those positions, both rounded to bfloat16: a long context's step reads the whole
 * cache, at float32 more than the memory bus carries in a step's time (138 MB after 3,000 positions). logits
 * (keep, head N) are the last `keep` rows' scores. cos / sin: (capacity, head_dim). */
void llama_forward(const llama *m, float *x, int64_t rows, int64_t start, uint16_t *kcache, uint16_t *vcache,
                   int64_t capacity, const float *cos, const float *sin, int64_t keep, float *logits,
                   uint8_t *scratch, int isa, int threads) {
    int64_t H = m->hidden, hd = m->head_dim, nq = m->heads * hd, nkv = m->kv_heads * hd, I = m->intermediate;
    int64_t wqkv = nq + 2 * nkv;
    const loops *f = loops_for(isa);
    float *h = (float *)scratch, *qkv = h + rows * H, *attn = qkv + rows * wqkv, *gu = attn + rows * nq;
    float *act = gu + rows * 2 * I, *scores = act + rows * I;
    uint8_t *q8 = (uint8_t *)(scores + BLOCK_ROWS * m->heads * capacity);
    for (int64_t layer = 0; layer < m->layers; layer++) {
        f->rms_norm(x, m->attn_norm + layer * H, rows, H, m->eps, h);
        run_parts(m->qkv, m->qkv_first, layer, h, rows, qkv, wqkv, q8, isa, threads);
        llama_place(m, layer, qkv, rows, start, kcache, vcache, capacity, cos, sin, isa);
        attention(f, m, qkv, wqkv, rows, start, kcache + layer * m->kv_heads * capacity * hd,
                  vcache + layer * m->kv_heads * capacity * hd, capacity, scores, attn, threads);
        q4q8_run(&m->o[layer], attn, rows, h, q8, isa, threads);
        f->add_into(x, h, rows * H);
        f->rms_norm(x, m->mlp_norm + layer * H, rows, H, m->eps, h);
        run_parts(m->gate_up, m->gate_up_first, layer, h, rows, gu, 2 * I, q8, isa, threads);
        f->silu_mul(gu, rows, I, act);
        q4q8_run(&m->down[layer], act, rows, h, q8, isa, threads);
        f->add_into(x, h, rows * H);
    }
    f->rms_norm(x + (rows - keep) * H, m->final_norm, keep, H, m->eps, h);
    q4q8_run(m->head, h, keep, logits, q8, isa, threads);
}
