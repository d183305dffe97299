// ops.cu - layer norm, GELU, row softmax and bias rows on the GPU; see cuda_ops.h.
#include "cuda_ops.h"

#include "cuda_linear.h"

#include <cuda_runtime.h>
#include <math.h>

#define S() ((cudaStream_t)sotto_cuda_get_stream())

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
                                     float eps, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    layer_norm_k<<<n, 256, 0, S()>>>(x, y, d, gamma, beta, eps);
    return launched(err, "layer_norm");
}

extern "C" int sotto_cuda_gelu(float *x, size_t n, sotto_err *err) {
    if (!n) return SOTTO_OK;
    gelu_k<<<grid_for(n), 256, 0, S()>>>(x, n);
    return launched(err, "gelu");
}

extern "C" int sotto_cuda_softmax_rows(float *x, int n, int d, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    softmax_k<<<n, 256, 0, S()>>>(x, d);
    return launched(err, "softmax");
}

extern "C" int sotto_cuda_add_bias_rows(float *x, const float *b, int n, int d, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    add_bias_k<<<grid_for((size_t)n * d), 256, 0, S()>>>(x, b, n, d);
    return launched(err, "add_bias_rows");
}

// One query row of one head against n_kv keys: scores in shared memory (sm:
// dh + n_kv floats), a warp per key, then the softmax and the weighted sum of V
// with threads along dh. Called by every thread of a 128-thread block.
__device__ void attend_one(const float *__restrict__ qr, const float *__restrict__ k, const float *__restrict__ v,
                           int kv_stride, float *__restrict__ orow, int n_kv, int dh, float scale, float *sm,
                           float *red) {
    float *qs = sm, *sc = sm + dh;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int d = threadIdx.x; d < dh; d += blockDim.x) qs[d] = qr[d] * scale;
    __syncthreads();
    for (int i = warp; i < n_kv; i += nw) { // a warp per key
        const float *kr = k + (size_t)i * kv_stride;
        float s = 0.f;
        for (int d = lane; d < dh; d += 32) s = fmaf(qs[d], kr[d], s);
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) sc[i] = s;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n_kv; i += blockDim.x) m = fmaxf(m, sc[i]);
    m = block_reduce<true>(m, red);
    float sum = 0.f;
    for (int i = threadIdx.x; i < n_kv; i += blockDim.x) {
        float e = expf(sc[i] - m);
        sc[i] = e;
        sum += e;
    }
    const float inv = 1.0f / block_reduce<false>(sum, red); // also orders the writes to sc
    for (int d = threadIdx.x; d < dh; d += blockDim.x) {
        float acc = 0.f;
        for (int i = 0; i < n_kv; i++) acc = fmaf(sc[i], v[(size_t)i * kv_stride + d], acc);
        orow[d] = acc * inv;
    }
}

// Block (head, row): 128 threads = 4 warps.
__global__ void attention_rows_k(const float *__restrict__ q, int q_stride, const float *__restrict__ k,
                                 const float *__restrict__ v, int kv_stride, float *__restrict__ out,
                                 int out_stride, int n_kv, int dh, float scale, int q_pos0) {
    extern __shared__ float sm[]; // q[dh], then scores[n_kv]
    __shared__ float red[32];
    const int h = blockIdx.x, r = blockIdx.y;
    if (q_pos0 >= 0 && q_pos0 + r + 1 < n_kv) n_kv = q_pos0 + r + 1; // causal row
    attend_one(q + (size_t)r * q_stride + (size_t)h * dh, k + (size_t)h * dh, v + (size_t)h * dh, kv_stride,
               out + (size_t)r * out_stride + (size_t)h * dh, n_kv, dh, scale, sm, red);
}

static int attention(const float *q, int q_stride, const float *k, const float *v, int kv_stride, float *out,
                     int out_stride, int nr, int n_kv, int n_head, int dh, float scale, int q_pos0, sotto_err *err) {
    if (nr <= 0 || n_head <= 0) return SOTTO_OK;
    if (n_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: n_kv %d, dh %d (1..256)", n_kv, dh);
    size_t smem = sizeof(float) * ((size_t)n_kv + (size_t)dh);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attention_rows_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return sotto_err_set(err, SOTTO_E_INTERNAL, "cuda attention: %zu bytes of shared memory: %s", smem,
                                 cudaGetErrorString(e));
    }
    attention_rows_k<<<dim3((unsigned)n_head, (unsigned)nr), 128, smem, S()>>>(q, q_stride, k, v, kv_stride, out, out_stride,
                                                                       n_kv, dh, scale, q_pos0);
    return launched(err, "attention_rows");
}

extern "C" int sotto_cuda_attention_rows(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                                         float *out, int out_stride, int nr, int n_kv, int n_head, int dh,
                                         float scale, sotto_err *err) {
    return attention(q, q_stride, k, v, kv_stride, out, out_stride, nr, n_kv, n_head, dh, scale, -1, err);
}

extern "C" int sotto_cuda_attention_causal(const float *q, int q_stride, const float *k, const float *v,
                                           int kv_stride, float *out, int out_stride, int nr, int n_kv, int n_head,
                                           int dh, float scale, int q_pos0, sotto_err *err) {
    if (q_pos0 < 0 || n_kv < q_pos0 + nr)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda causal attention: %d keys for rows at %d..%d", n_kv,
                             q_pos0, q_pos0 + nr - 1);
    return attention(q, q_stride, k, v, kv_stride, out, out_stride, nr, n_kv, n_head, dh, scale, q_pos0, err);
}

__global__ void add_k(float *y, const float *__restrict__ x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

extern "C" int sotto_cuda_add(float *y, const float *x, size_t n, sotto_err *err) {
    if (!n) return SOTTO_OK;
    add_k<<<grid_for(n), 256, 0, S()>>>(y, x, n);
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

extern "C" int sotto_cuda_im2col_k3(const float *x, int t_in, int c_in, int stride, float *cols, sotto_err *err) {
    if (t_in <= 0 || c_in <= 0 || stride <= 0)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda im2col: t_in %d, c_in %d, stride %d", t_in, c_in, stride);
    const int t_out = (t_in - 1) / stride + 1;
    im2col_k3_k<<<grid_for((size_t)t_out * c_in * 3), 256, 0, S()>>>(x, t_in, c_in, stride, t_out, cols);
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
                                    sotto_err *err) {
    if (n <= 0) return SOTTO_OK;
    kv_append_k<<<n, 128, 0, S()>>>(k, v, d, rows, layer);
    return launched(err, "kv_append");
}

// Block (head, row): self-attention over the row's cache (pos + 1 keys) or
// cross-attention over its stream's n_kv encoder positions.
__global__ void attention_meta_k(const float *__restrict__ q, float *__restrict__ out, int d, int dh,
                                 const sotto_cuda_row *__restrict__ rows, int layer, int cross, int n_cross,
                                 float scale) {
    extern __shared__ float sm[];
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
    attend_one(q + (size_t)i * d + (size_t)h * dh, k + (size_t)h * dh, v + (size_t)h * dh, d,
               out + (size_t)i * d + (size_t)h * dh, n_kv, dh, scale, sm, red);
}

static int attention_meta(const float *q, float *out, int n, int n_head, int dh, const sotto_cuda_row *rows, int layer,
                          int cross, int max_kv, float scale, sotto_err *err) {
    if (n <= 0 || n_head <= 0) return SOTTO_OK;
    if (max_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: %d keys, dh %d (1..256)", max_kv, dh);
    size_t smem = sizeof(float) * ((size_t)max_kv + (size_t)dh);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(attention_meta_k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return sotto_err_set(err, SOTTO_E_INTERNAL, "cuda attention: %zu bytes of shared memory: %s", smem,
                                 cudaGetErrorString(e));
    }
    attention_meta_k<<<dim3((unsigned)n_head, (unsigned)n), 128, smem, S()>>>(q, out, n_head * dh, dh, rows, layer, cross,
                                                                           max_kv, scale);
    return launched(err, cross ? "attention_cross" : "attention_self");
}

extern "C" int sotto_cuda_attention_self(const float *q, float *out, int n, int n_head, int dh,
                                         const sotto_cuda_row *rows, int layer, int max_kv, float scale,
                                         sotto_err *err) {
    return attention_meta(q, out, n, n_head, dh, rows, layer, 0, max_kv, scale, err);
}

extern "C" int sotto_cuda_attention_cross(const float *q, float *out, int n, int n_head, int dh,
                                          const sotto_cuda_row *rows, int layer, int n_kv, float scale,
                                          sotto_err *err) {
    return attention_meta(q, out, n, n_head, dh, rows, layer, 1, n_kv, scale, err);
}
