// ops.cu - layer norm, GELU, row softmax and bias rows on the GPU; see cuda_ops.h.
#include "cuda_ops.h"

#include "cuda_linear.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

static int launched(sotto_err *err, const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? SOTTO_OK
                            : sotto_err_set(err, SOTTO_E_INTERNAL, "cuda: %s: %s", what, cudaGetErrorString(e));
}

// Sum (or max) over the block; every thread gets the result. blockDim.x: a multiple of 32, <= 1024.
template <bool MAX>
__device__ float block_reduce(float v, float *shared /* [32] */) {
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = MAX ? fmaxf(v, o) : v + o;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads(); // shared may still be read by an earlier call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nw ? shared[lane] : (MAX ? -INFINITY : 0.f);
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = MAX ? fmaxf(v, o) : v + o;
    }
    return v;
}

// One block per row: mean, then the variance of the centred values (two passes, as the CPU).
__global__ void layer_norm_k(const float *__restrict__ x, float *__restrict__ y, int d, const float *__restrict__ g,
                             const float *__restrict__ b, float eps) {
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * d;
    float *yr = y + (size_t)blockIdx.x * d;
    float s = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
    const float mean = block_reduce<false>(s, red) / (float)d;
    float v = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float c = xr[i] - mean;
        v = fmaf(c, c, v);
    }
    const float inv = 1.0f / sqrtf(block_reduce<false>(v, red) / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * g[i] + b[i];
}

__global__ void gelu_k(float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

__global__ void softmax_k(float *x, int d) {
    __shared__ float red[32];
    float *xr = x + (size_t)blockIdx.x * d;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < d; i += blockDim.x) m = fmaxf(m, xr[i]);
    m = block_reduce<true>(m, red);
    if (m == -INFINITY) { // every entry masked: zeros, as the CPU does
        for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] = 0.f;
        return;
    }
    float s = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float e = expf(xr[i] - m);
        xr[i] = e;
        s += e;
    }
    const float inv = 1.0f / block_reduce<false>(s, red);
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] *= inv;
}

__global__ void add_bias_k(float *x, const float *__restrict__ b, int n, int d) {
    size_t total = (size_t)n * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        x[i] += b[i % d];
}

static unsigned grid_for(size_t n) {
    size_t g = (n + 255) / 256;
    return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

extern "C" int sotto_cuda_layer_norm(const float *x, float *y, int n, int d, const float *gamma, const float *beta,
                                     float eps, sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    layer_norm_k<<<n, 256, 0, stream>>>(x, y, d, gamma, beta, eps);
    return launched(err, "layer_norm");
}

extern "C" int sotto_cuda_gelu(float *x, size_t n, sotto_cuda_stream stream, sotto_err *err) {
    if (!n) return SOTTO_OK;
    gelu_k<<<grid_for(n), 256, 0, stream>>>(x, n);
    return launched(err, "gelu");
}

extern "C" int sotto_cuda_softmax_rows(float *x, int n, int d, sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    softmax_k<<<n, 256, 0, stream>>>(x, d);
    return launched(err, "softmax");
}

extern "C" int sotto_cuda_add_bias_rows(float *x, const float *b, int n, int d, sotto_cuda_stream stream,
                                        sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    add_bias_k<<<grid_for((size_t)n * d), 256, 0, stream>>>(x, b, n, d);
    return launched(err, "add_bias_rows");
}

// One query row of one head against n_kv keys, by every thread of the block
// (blockDim.x: a multiple of 32, >= dh). Shared memory sm: dh + n_kv +
// blockDim.x floats (the scaled query, the scores, the partial outputs).
//   scores: a thread per key, each a whole dot product over dh (VEC: float4
//           loads of K; needs dh % 4 == 0 and 16-byte aligned K rows), so the
//           loads of many keys are in flight at once;
//   softmax over the block;
//   values: G = blockDim.x / dh groups of dh threads, group g summing keys
//           g, g + G, ... (loads coalesced along dh, four keys in flight per
//           thread), then the G partial rows added in shared memory.
// The first version gave each key to a warp in turn and summed V with dh
// threads over every key: on the H200 a tiny.en decoder step took 2.1 ms,
// almost all of it in the cross-attention over 1500 positions.
template <bool VEC>
__device__ void attend_core(const float *__restrict__ qr, const float *__restrict__ k, const float *__restrict__ v,
                            int kv_stride, int n_kv, int dh, float scale, float *sm, float *red, float *m_out,
                            float *sum_out) {
    float *qs = sm, *sc = sm + dh, *po = sm + dh + n_kv;
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int d = tid; d < dh; d += nt) qs[d] = qr[d] * scale;
    __syncthreads();
    float m = -INFINITY;
    for (int i = tid; i < n_kv; i += nt) {
        const float *kr = k + (size_t)i * kv_stride;
        float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
        if (VEC) {
            for (int d = 0; d < dh; d += 4) {
                const float4 a = __ldg((const float4 *)(kr + d)), b = *(const float4 *)(qs + d);
                s0 = fmaf(a.x, b.x, s0), s1 = fmaf(a.y, b.y, s1), s2 = fmaf(a.z, b.z, s2), s3 = fmaf(a.w, b.w, s3);
            }
        } else {
            int d = 0;
            for (; d + 3 < dh; d += 4) {
                s0 = fmaf(qs[d], __ldg(kr + d), s0), s1 = fmaf(qs[d + 1], __ldg(kr + d + 1), s1);
                s2 = fmaf(qs[d + 2], __ldg(kr + d + 2), s2), s3 = fmaf(qs[d + 3], __ldg(kr + d + 3), s3);
            }
            for (; d < dh; d++) s0 = fmaf(qs[d], __ldg(kr + d), s0);
        }
        const float s = (s0 + s1) + (s2 + s3);
        sc[i] = s;
        m = fmaxf(m, s);
    }
    m = block_reduce<true>(m, red); // its barriers also publish sc
    float sum = 0.f;
    for (int i = tid; i < n_kv; i += nt) {
        float e = expf(sc[i] - m);
        sc[i] = e;
        sum += e;
    }
    sum = block_reduce<false>(sum, red); // also orders the writes to sc
    const int G = nt / dh, g = tid / dh, d = tid - g * dh;
    if (g < G) {
        const float *vd = v + d;
        float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
        int i = g;
        for (; i + 3 * G < n_kv; i += 4 * G) {
            a0 = fmaf(sc[i], __ldg(vd + (size_t)i * kv_stride), a0);
            a1 = fmaf(sc[i + G], __ldg(vd + (size_t)(i + G) * kv_stride), a1);
            a2 = fmaf(sc[i + 2 * G], __ldg(vd + (size_t)(i + 2 * G) * kv_stride), a2);
            a3 = fmaf(sc[i + 3 * G], __ldg(vd + (size_t)(i + 3 * G) * kv_stride), a3);
        }
        for (; i < n_kv; i += G) a0 = fmaf(sc[i], __ldg(vd + (size_t)i * kv_stride), a0);
        po[g * dh + d] = (a0 + a1) + (a2 + a3);
    }
    __syncthreads();
    *m_out = m, *sum_out = sum;
}

// The G groups' sums of column c (after attend_core).
__device__ __forceinline__ float attend_col(const float *sm, int n_kv, int dh, int c) {
    const float *po = sm + dh + n_kv;
    const int G = blockDim.x / dh;
    float acc = 0.f;
    for (int j = 0; j < G; j++) acc += po[j * dh + c];
    return acc;
}

template <bool VEC>
__device__ void attend_one(const float *__restrict__ qr, const float *__restrict__ k, const float *__restrict__ v,
                           int kv_stride, float *__restrict__ orow, int n_kv, int dh, float scale, float *sm,
                           float *red) {
    float m, sum;
    attend_core<VEC>(qr, k, v, kv_stride, n_kv, dh, scale, sm, red, &m, &sum);
    const float inv = 1.0f / sum;
    for (int c = threadIdx.x; c < dh; c += blockDim.x) orow[c] = attend_col(sm, n_kv, dh, c) * inv;
}

// Threads per attention block: enough for the longest key range to keep many
// loads in flight, and at least dh (one value group).
static int att_threads(int max_kv, int dh) {
    int nt = max_kv > 512 ? 512 : max_kv > 128 ? 256 : 128;
    while (nt < dh) nt *= 2;
    return nt;
}

static size_t att_smem(int max_kv, int dh, int nt) { return sizeof(float) * ((size_t)dh + (size_t)max_kv + (size_t)nt); }

// Shared memory past the default 48 KB must be asked for, once per kernel and size.
template <typename K> static int att_smem_optin(K kernel, size_t smem, sotto_err *err) {
    if (smem <= 48 * 1024) return SOTTO_OK;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    return e == cudaSuccess ? SOTTO_OK
                            : sotto_err_set(err, SOTTO_E_INTERNAL, "cuda attention: %zu bytes of shared memory: %s",
                                            smem, cudaGetErrorString(e));
}

// Block (head, row).
template <bool VEC>
__global__ void attention_rows_k(const float *__restrict__ q, int q_stride, const float *__restrict__ k,
                                 const float *__restrict__ v, int kv_stride, float *__restrict__ out,
                                 int out_stride, int n_kv, int dh, float scale, int q_pos0) {
    extern __shared__ float4 sm4[]; // q[dh], scores[n_kv], partial outputs[blockDim.x]
    float *sm = (float *)sm4;
    __shared__ float red[32];
    const int h = blockIdx.x, r = blockIdx.y;
    if (q_pos0 >= 0 && q_pos0 + r + 1 < n_kv) n_kv = q_pos0 + r + 1; // causal row
    attend_one<VEC>(q + (size_t)r * q_stride + (size_t)h * dh, k + (size_t)h * dh, v + (size_t)h * dh, kv_stride,
                    out + (size_t)r * out_stride + (size_t)h * dh, n_kv, dh, scale, sm, red);
}

static int attention(const float *q, int q_stride, const float *k, const float *v, int kv_stride, float *out,
                     int out_stride, int nr, int n_kv, int n_head, int dh, float scale, int q_pos0,
                     cudaStream_t stream, sotto_err *err) {
    if (nr <= 0 || n_head <= 0) return SOTTO_OK;
    if (n_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: n_kv %d, dh %d (1..256)", n_kv, dh);
    const int nt = att_threads(n_kv, dh);
    const size_t smem = att_smem(n_kv, dh, nt);
    const bool vec = dh % 4 == 0 && kv_stride % 4 == 0 && ((uintptr_t)k & 15) == 0;
    const dim3 grid((unsigned)n_head, (unsigned)nr);
    int rc;
    if (vec) {
        if ((rc = att_smem_optin(attention_rows_k<true>, smem, err))) return rc;
        attention_rows_k<true><<<grid, nt, smem, stream>>>(q, q_stride, k, v, kv_stride, out, out_stride, n_kv, dh,
                                                        scale, q_pos0);
    } else {
        if ((rc = att_smem_optin(attention_rows_k<false>, smem, err))) return rc;
        attention_rows_k<false><<<grid, nt, smem, stream>>>(q, q_stride, k, v, kv_stride, out, out_stride, n_kv, dh,
                                                         scale, q_pos0);
    }
    return launched(err, "attention_rows");
}

extern "C" int sotto_cuda_attention_rows(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                                         float *out, int out_stride, int nr, int n_kv, int n_head, int dh,
                                         float scale, sotto_cuda_stream stream, sotto_err *err) {
    return attention(q, q_stride, k, v, kv_stride, out, out_stride, nr, n_kv, n_head, dh, scale, -1, stream, err);
}

extern "C" int sotto_cuda_attention_causal(const float *q, int q_stride, const float *k, const float *v,
                                           int kv_stride, float *out, int out_stride, int nr, int n_kv, int n_head,
                                           int dh, float scale, int q_pos0, sotto_cuda_stream stream,
                                           sotto_err *err) {
    if (q_pos0 < 0 || n_kv < q_pos0 + nr)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda causal attention: %d keys for rows at %d..%d", n_kv,
                             q_pos0, q_pos0 + nr - 1);
    return attention(q, q_stride, k, v, kv_stride, out, out_stride, nr, n_kv, n_head, dh, scale, q_pos0, stream,
                     err);
}

__global__ void add_k(float *y, const float *__restrict__ x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

extern "C" int sotto_cuda_add(float *y, const float *x, size_t n, sotto_cuda_stream stream, sotto_err *err) {
    if (!n) return SOTTO_OK;
    add_k<<<grid_for(n), 256, 0, stream>>>(y, x, n);
    return launched(err, "add");
}

// One thread per output element of cols [t_out][c_in * 3].
__global__ void im2col_k3_k(const float *__restrict__ x, int t_in, int c_in, int stride, int t_out,
                            float *__restrict__ cols) {
    const size_t kc = (size_t)c_in * 3, total = (size_t)t_out * kc;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / kc), rem = (int)(i % kc), c = rem / 3, j = rem % 3;
        const int ti = t * stride - 1 + j;
        cols[i] = ti < 0 || ti >= t_in ? 0.f : x[(size_t)ti * c_in + c];
    }
}

extern "C" int sotto_cuda_im2col_k3(const float *x, int t_in, int c_in, int stride, float *cols,
                                    sotto_cuda_stream stream, sotto_err *err) {
    if (t_in <= 0 || c_in <= 0 || stride <= 0)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda im2col: t_in %d, c_in %d, stride %d", t_in, c_in, stride);
    const int t_out = (t_in - 1) / stride + 1;
    im2col_k3_k<<<grid_for((size_t)t_out * c_in * 3), 256, 0, stream>>>(x, t_in, c_in, stride, t_out, cols);
    return launched(err, "im2col_k3");
}

// ---- decoder steps with per-row metadata (capturable in a CUDA graph) ----

__global__ void kv_append_k(const float *__restrict__ k, const float *__restrict__ v, int d,
                            const sotto_cuda_row *__restrict__ rows, int layer) {
    const int i = blockIdx.x;
    const sotto_cuda_row r = rows[i];
    float *kd = r.self_k + (size_t)layer * r.self_layer_stride + (size_t)r.pos * d;
    float *vd = r.self_v + (size_t)layer * r.self_layer_stride + (size_t)r.pos * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        kd[c] = k[(size_t)i * d + c];
        vd[c] = v[(size_t)i * d + c];
    }
}

extern "C" int sotto_cuda_kv_append(const float *k, const float *v, int n, int d, const sotto_cuda_row *rows, int layer,
                                    sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0) return SOTTO_OK;
    kv_append_k<<<n, 128, 0, stream>>>(k, v, d, rows, layer);
    return launched(err, "kv_append");
}

// Block (head, row): self-attention over the row's cache (pos + 1 keys) or
// cross-attention over its stream's n_kv encoder positions. Row pointers are
// cudaMalloc'd bases plus whole rows of d floats, so VEC (d % 4 == 0) may
// read K as float4.
template <bool VEC>
__global__ void attention_meta_k(const float *__restrict__ q, float *__restrict__ out, int d, int dh,
                                 const sotto_cuda_row *__restrict__ rows, int layer, int cross, int n_cross,
                                 float scale) {
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    __shared__ float red[32];
    const int h = blockIdx.x, i = blockIdx.y;
    const sotto_cuda_row r = rows[i];
    const float *k, *v;
    int n_kv;
    if (cross) {
        k = r.cross_k + (size_t)layer * r.cross_layer_stride, v = r.cross_v + (size_t)layer * r.cross_layer_stride;
        n_kv = n_cross;
    } else {
        k = r.self_k + (size_t)layer * r.self_layer_stride, v = r.self_v + (size_t)layer * r.self_layer_stride;
        n_kv = r.pos + 1;
    }
    attend_one<VEC>(q + (size_t)i * d + (size_t)h * dh, k + (size_t)h * dh, v + (size_t)h * dh, d,
                    out + (size_t)i * d + (size_t)h * dh, n_kv, dh, scale, sm, red);
}

static int attention_meta(const float *q, float *out, int n, int n_head, int dh, const sotto_cuda_row *rows, int layer,
                          int cross, int max_kv, float scale, cudaStream_t stream, sotto_err *err) {
    if (n <= 0 || n_head <= 0) return SOTTO_OK;
    if (max_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: %d keys, dh %d (1..256)", max_kv, dh);
    const int nt = att_threads(max_kv, dh), d = n_head * dh;
    const size_t smem = att_smem(max_kv, dh, nt);
    const dim3 grid((unsigned)n_head, (unsigned)n);
    int rc;
    if (dh % 4 == 0) {
        if ((rc = att_smem_optin(attention_meta_k<true>, smem, err))) return rc;
        attention_meta_k<true><<<grid, nt, smem, stream>>>(q, out, d, dh, rows, layer, cross, max_kv, scale);
    } else {
        if ((rc = att_smem_optin(attention_meta_k<false>, smem, err))) return rc;
        attention_meta_k<false><<<grid, nt, smem, stream>>>(q, out, d, dh, rows, layer, cross, max_kv, scale);
    }
    return launched(err, cross ? "attention_cross" : "attention_self");
}

extern "C" int sotto_cuda_attention_self(const float *q, float *out, int n, int n_head, int dh,
                                         const sotto_cuda_row *rows, int layer, int max_kv, float scale,
                                         sotto_cuda_stream stream, sotto_err *err) {
    return attention_meta(q, out, n, n_head, dh, rows, layer, 0, max_kv, scale, stream, err);
}

// ---- cross-attention split over key blocks ("flash decoding") ----------
// A decoder step has few (head, row) pairs (tiny.en, one stream: 6) and 1500
// keys each; one block per pair leaves most of the GPU idle. Each pair's keys
// are cut into S chunks, a block per (head, row, chunk) writes its chunk's
// max m, sum l of exp(score - m) and unnormalised output o[dh] to scratch,
// and a second kernel combines the chunks: out = sum_s o_s e^(m_s - M) /
// sum_s l_s e^(m_s - M), M = max_s m_s.
#define SPLIT_MIN_KEYS 64

static int cross_splits(int n, int n_head, int n_kv) {
    const int pairs = n * n_head;
    int s = (SOTTO_CUDA_XSPLIT_BLOCKS + pairs - 1) / pairs; // pairs * s < XSPLIT_BLOCKS + pairs: the scratch bound
    const int most = (n_kv + SPLIT_MIN_KEYS - 1) / SPLIT_MIN_KEYS;
    return s < 1 ? 1 : s > most ? most : s;
}

template <bool VEC>
__global__ void attention_cross_part_k(const float *__restrict__ q, int d, int dh, const sotto_cuda_row *__restrict__ rows,
                                       int layer, int n_kv, int chunk, float scale, float *__restrict__ part) {
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    __shared__ float red[32];
    const int h = blockIdx.x, i = blockIdx.y, s = blockIdx.z, S = gridDim.z;
    const sotto_cuda_row r = rows[i];
    const int k0 = s * chunk, nk = min(chunk, n_kv - k0);
    float *out = part + (((size_t)i * gridDim.x + h) * S + s) * (size_t)(dh + 2);
    if (nk <= 0) { // an empty chunk (n_kv not a multiple of the chunk): weight 0
        for (int c = threadIdx.x; c < dh + 2; c += blockDim.x) out[c] = c == 0 ? -INFINITY : 0.f;
        return;
    }
    const size_t base = (size_t)layer * r.cross_layer_stride + (size_t)k0 * d + (size_t)h * dh;
    float m, l;
    attend_core<VEC>(q + (size_t)i * d + (size_t)h * dh, r.cross_k + base, r.cross_v + base, d, nk, dh, scale, sm,
                     red, &m, &l);
    if (threadIdx.x == 0) out[0] = m, out[1] = l;
    for (int c = threadIdx.x; c < dh; c += blockDim.x) out[2 + c] = attend_col(sm, nk, dh, c);
}

__global__ void attention_cross_combine_k(const float *__restrict__ part, int S, int dh, int d,
                                          float *__restrict__ out) {
    const int h = blockIdx.x, i = blockIdx.y;
    const float *p = part + ((size_t)i * gridDim.x + h) * S * (size_t)(dh + 2);
    float M = -INFINITY;
    for (int s = 0; s < S; s++) M = fmaxf(M, p[(size_t)s * (dh + 2)]);
    float L = 0.f;
    for (int s = 0; s < S; s++) {
        const float ms = p[(size_t)s * (dh + 2)];
        if (ms != -INFINITY) L += p[(size_t)s * (dh + 2) + 1] * expf(ms - M);
    }
    const float inv = 1.0f / L;
    for (int c = threadIdx.x; c < dh; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < S; s++) {
            const float ms = p[(size_t)s * (dh + 2)];
            if (ms != -INFINITY) acc = fmaf(p[(size_t)s * (dh + 2) + 2 + c], expf(ms - M), acc);
        }
        out[(size_t)i * d + (size_t)h * dh + c] = acc * inv;
    }
}

extern "C" int sotto_cuda_attention_cross(const float *q, float *out, int n, int n_head, int dh,
                                          const sotto_cuda_row *rows, int layer, int n_kv, float scale,
                                          float *scratch, sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0 || n_head <= 0) return SOTTO_OK;
    if (n_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: %d keys, dh %d (1..256)", n_kv, dh);
    const int S = scratch ? cross_splits(n, n_head, n_kv) : 1;
    if (S == 1) return attention_meta(q, out, n, n_head, dh, rows, layer, 1, n_kv, scale, stream, err);
    const int chunk = (n_kv + S - 1) / S, nt = att_threads(chunk, dh), d = n_head * dh;
    const size_t smem = att_smem(chunk, dh, nt);
    const dim3 grid((unsigned)n_head, (unsigned)n, (unsigned)S);
    int rc;
    if (dh % 4 == 0) {
        if ((rc = att_smem_optin(attention_cross_part_k<true>, smem, err))) return rc;
        attention_cross_part_k<true><<<grid, nt, smem, stream>>>(q, d, dh, rows, layer, n_kv, chunk, scale, scratch);
    } else {
        if ((rc = att_smem_optin(attention_cross_part_k<false>, smem, err))) return rc;
        attention_cross_part_k<false><<<grid, nt, smem, stream>>>(q, d, dh, rows, layer, n_kv, chunk, scale, scratch);
    }
    if ((rc = launched(err, "attention_cross (chunks)"))) return rc;
    attention_cross_combine_k<<<dim3((unsigned)n_head, (unsigned)n), dh < 32 ? 32 : (dh + 31) / 32 * 32, 0, stream>>>(
        scratch, S, dh, d, out);
    return launched(err, "attention_cross (combine)");
}
