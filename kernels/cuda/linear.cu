// linear.cu - skinny weight-only GEMM (decode-sized batches) for every sotto
// weight format; see cuda_linear.h.
#include "cuda_internal.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sotto_cuda_wmat {
    sotto_wfmt fmt;
    int rows, cols;
    float global_scale;
    void *data, *scales;
    size_t bytes;
};

// What a kernel needs, by value.
struct WDev {
    const void *data, *scales;
    int rows, cols;
    float gs;
};

__constant__ float c_nf4[16];
__constant__ float c_e2m1[8];
__constant__ float c_e4m3[256];

static int cuda_fail(sotto_err *err, cudaError_t e, const char *what) {
    return sotto_err_set(err, SOTTO_E_INTERNAL, "cuda: %s: %s", what, cudaGetErrorString(e));
}

extern "C" int sotto_cuda_available(char *name, size_t name_sz, char *why, size_t why_sz) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
        snprintf(why, why_sz, "%s", e == cudaErrorNoDevice ? "no CUDA device" : "no NVIDIA driver, or one older than this CUDA runtime");
        return 0;
    }
    if (e != cudaSuccess || n == 0) {
        snprintf(why, why_sz, "%s", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
        return 0;
    }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        snprintf(why, why_sz, "%s", cudaGetErrorString(e));
        return 0;
    }
    snprintf(name, name_sz, "%s (sm_%d%d, %.0f GiB)", p.name, p.major, p.minor, p.totalGlobalMem / 1073741824.0);
    if (p.major < 8) {
        snprintf(why, why_sz, "%s is sm_%d%d; sotto's kernels are built for sm_80 and sm_90", p.name, p.major, p.minor);
        return 0;
    }
    return 1;
}

extern "C" int sotto__cuda_set_tables(const float *t, sotto_err *err) {
    cudaError_t e;
    if ((e = cudaMemcpyToSymbol(c_nf4, t, sizeof(float) * 16)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(c_e2m1, t + 16, sizeof(float) * 8)) != cudaSuccess ||
        (e = cudaMemcpyToSymbol(c_e4m3, t + 24, sizeof(float) * 256)) != cudaSuccess)
        return cuda_fail(err, e, "code tables");
    return SOTTO_OK;
}

extern "C" void *sotto_cuda_malloc(size_t bytes, sotto_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); // not sticky: clear it
        sotto_err_set(err, SOTTO_E_NOMEM, "GPU out of memory allocating %.1f MiB", bytes / 1048576.0);
        return NULL;
    }
    if (e != cudaSuccess) {
        cuda_fail(err, e, "cudaMalloc");
        return NULL;
    }
    return p;
}

extern "C" void sotto_cuda_free(void *p) {
    if (p) cudaFree(p);
}

extern "C" int sotto_cuda_copy(void *dst, const void *src, size_t bytes, int to_device, sotto_cuda_stream stream,
                               sotto_err *err) {
    cudaError_t e =
        cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? SOTTO_OK : cuda_fail(err, e, "cudaMemcpy");
}

extern "C" sotto_cuda_wmat *sotto__cuda_wmat_new(sotto_wfmt fmt, int rows, int cols, float global_scale,
                                                 const void *data, size_t data_bytes, const void *scales,
                                                 size_t scale_bytes, sotto_err *err) {
    sotto_cuda_wmat *w = (sotto_cuda_wmat *)calloc(1, sizeof *w);
    if (!w) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    w->fmt = fmt, w->rows = rows, w->cols = cols, w->global_scale = global_scale;
    // an upload is a load-time copy that waits: on the legacy default stream
    if (!(w->data = sotto_cuda_malloc(data_bytes, err)) ||
        sotto_cuda_copy(w->data, data, data_bytes, 1, NULL, err) ||
        (scale_bytes && (!(w->scales = sotto_cuda_malloc(scale_bytes, err)) ||
                         sotto_cuda_copy(w->scales, scales, scale_bytes, 1, NULL, err)))) {
        sotto_cuda_wmat_free(w);
        return NULL;
    }
    w->bytes = data_bytes + scale_bytes;
    return w;
}

extern "C" void sotto_cuda_wmat_free(sotto_cuda_wmat *w) {
    if (!w) return;
    sotto_cuda_free(w->data);
    sotto_cuda_free(w->scales);
    free(w);
}

extern "C" size_t sotto_cuda_wmat_bytes(const sotto_cuda_wmat *w) { return w ? w->bytes : 0; }

// Calls f.template run<FMT, VEC>() for a format (VEC: cols % 8 == 0, which
// the block formats always are); false for an unknown format.
template <class F> static bool by_format(sotto_wfmt fmt, bool vec, F &&f) {
    switch (fmt) {
    case SOTTO_WFMT_F32: vec ? f.template run<SOTTO_WFMT_F32, true>() : f.template run<SOTTO_WFMT_F32, false>(); return true;
    case SOTTO_WFMT_BF16: vec ? f.template run<SOTTO_WFMT_BF16, true>() : f.template run<SOTTO_WFMT_BF16, false>(); return true;
    case SOTTO_WFMT_Q8: f.template run<SOTTO_WFMT_Q8, true>(); return true;
    case SOTTO_WFMT_NF4: f.template run<SOTTO_WFMT_NF4, true>(); return true;
    case SOTTO_WFMT_NVFP4: f.template run<SOTTO_WFMT_NVFP4, true>(); return true;
    default: return false;
    }
}

static int launched(const char *what, sotto_err *err) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? SOTTO_OK : cuda_fail(err, e, what);
}

// ---- decoding 8 consecutive weights (g: element index, a multiple of 8) ----------------

__device__ __forceinline__ float bf16(uint32_t h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ float e2m1(const float *tab, uint32_t q) {
    float m = tab[q & 7];
    return (q & 8) ? -m : m;
}

template <int FMT>
__device__ __forceinline__ void decode8(const WDev &w, const float *s_nf4, const float *s_e2m1, size_t g,
                                        float v[8]) {
    if (FMT == SOTTO_WFMT_F32) {
        const float4 *p = (const float4 *)((const float *)w.data + g);
        float4 a = __ldg(p), b = __ldg(p + 1);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else if (FMT == SOTTO_WFMT_BF16) {
        uint4 u = __ldg((const uint4 *)((const uint16_t *)w.data + g));
        uint32_t q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) v[2 * k] = bf16(q[k] & 0xffffu), v[2 * k + 1] = bf16(q[k] >> 16);
    } else if (FMT == SOTTO_WFMT_Q8) {
        uint2 u = __ldg((const uint2 *)((const int8_t *)w.data + g));
        float s = __ldg((const float *)w.scales + g / 32);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[k] = (float)(int8_t)(u.x >> (8 * k)) * s;
            v[4 + k] = (float)(int8_t)(u.y >> (8 * k)) * s;
        }
    } else if (FMT == SOTTO_WFMT_NF4) { // element 2i in the high nibble of byte i
        uint32_t u = __ldg((const uint32_t *)((const uint8_t *)w.data + g / 2));
        float am = __ldg((const float *)w.scales + g / 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t b = (u >> (8 * i)) & 255u;
            v[2 * i] = s_nf4[b >> 4] * am;
            v[2 * i + 1] = s_nf4[b & 15] * am;
        }
    } else { // NVFP4: element 2i in the low nibble
        uint32_t u = __ldg((const uint32_t *)((const uint8_t *)w.data + g / 2));
        float s = c_e4m3[__ldg((const uint8_t *)w.scales + g / 16)] * w.gs;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t b = (u >> (8 * i)) & 255u;
            v[2 * i] = e2m1(s_e2m1, b & 15) * s;
            v[2 * i + 1] = e2m1(s_e2m1, b >> 4) * s;
        }
    }
}

#define NB 8 // input rows per pass over the weights

// One warp per output feature; VEC: cols % 8 == 0 (always for the block formats).
template <int FMT, bool VEC>
__global__ void __launch_bounds__(256) skinny(WDev w, const float *__restrict__ x, int n,
                                              const float *__restrict__ bias, float *__restrict__ y, int accumulate) {
    __shared__ float s_nf4[16], s_e2m1[8];
    if (threadIdx.x < 16) s_nf4[threadIdx.x] = c_nf4[threadIdx.x];
    if (threadIdx.x < 8) s_e2m1[threadIdx.x] = c_e2m1[threadIdx.x];
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= w.rows) return;
    const int cols = w.cols;
    const size_t base = (size_t)row * (size_t)cols;
    for (int n0 = 0; n0 < n; n0 += NB) {
        const int nb = n - n0 < NB ? n - n0 : NB;
        float acc[NB];
#pragma unroll
        for (int j = 0; j < NB; j++) acc[j] = 0.f;
        if (VEC) {
            for (int e = lane * 8; e < cols; e += 256) {
                float v[8];
                decode8<FMT>(w, s_nf4, s_e2m1, base + (size_t)e, v);
#pragma unroll
                for (int j = 0; j < NB; j++) {
                    if (j < nb) {
                        const float4 *xp = (const float4 *)(x + (size_t)(n0 + j) * cols + e);
                        float4 a = __ldg(xp), b = __ldg(xp + 1);
                        float t = acc[j];
                        t = fmaf(v[0], a.x, t), t = fmaf(v[1], a.y, t), t = fmaf(v[2], a.z, t);
                        t = fmaf(v[3], a.w, t), t = fmaf(v[4], b.x, t), t = fmaf(v[5], b.y, t);
                        t = fmaf(v[6], b.z, t), t = fmaf(v[7], b.w, t);
                        acc[j] = t;
                    }
                }
            }
        } else {
            for (int c = lane; c < cols; c += 32) {
                float wv = FMT == SOTTO_WFMT_F32 ? __ldg((const float *)w.data + base + c)
                                                 : bf16(__ldg((const uint16_t *)w.data + base + c));
#pragma unroll
                for (int j = 0; j < NB; j++)
                    if (j < nb) acc[j] = fmaf(wv, __ldg(x + (size_t)(n0 + j) * cols + c), acc[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < NB; j++) {
            float t = acc[j];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
            if (lane == 0 && j < nb) {
                float *yp = y + (size_t)(n0 + j) * w.rows + row;
                *yp = (accumulate ? *yp : 0.f) + t + (bias ? bias[row] : 0.f);
            }
        }
    }
}

struct SkinnyLaunch {
    WDev d;
    const float *x, *bias;
    float *y;
    int n, acc;
    dim3 grid;
    cudaStream_t stream;
    template <int FMT, bool VEC> void run() { skinny<FMT, VEC><<<grid, 256, 0, stream>>>(d, x, n, bias, y, acc); }
};

static int linear_launch(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y, int acc,
                         cudaStream_t stream, sotto_err *err) {
    if (n <= 0) return SOTTO_OK;
    SkinnyLaunch l = {{w->data, w->scales, w->rows, w->cols, w->global_scale}, x, bias, y, n, acc,
                      dim3((unsigned)((w->rows + 7) / 8)), stream};
    if (!by_format(w->fmt, w->cols % 8 == 0, l)) return sotto_err_set(err, SOTTO_E_INVALID, "cuda: unknown weight format");
    return launched("kernel launch", err);
}

// fp32 -> bf16, round to nearest even (NaN kept quiet), as include/half.h.
__device__ __forceinline__ uint16_t to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Stores of decoded values: 8 at a time (16- or 32-byte aligned) or one.
__device__ __forceinline__ void store8(float *p, const float v[8]) {
    float4 *o = (float4 *)p;
    o[0] = make_float4(v[0], v[1], v[2], v[3]);
    o[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8(uint16_t *p, const float v[8]) {
    uint4 o;
    o.x = to_bf16(v[0]) | (uint32_t)to_bf16(v[1]) << 16, o.y = to_bf16(v[2]) | (uint32_t)to_bf16(v[3]) << 16;
    o.z = to_bf16(v[4]) | (uint32_t)to_bf16(v[5]) << 16, o.w = to_bf16(v[6]) | (uint32_t)to_bf16(v[7]) << 16;
    *(uint4 *)p = o;
}
__device__ __forceinline__ void store1(float *p, float v) { *p = v; }
__device__ __forceinline__ void store1(uint16_t *p, float v) { *p = to_bf16(v); }

// A whole matrix decoded into dst (float, or bf16 as uint16_t): one thread per
// 8 weights (cols % 8 == 0) or per weight.
template <int FMT, bool VEC, typename T>
__global__ void dequant_k(WDev w, T *__restrict__ dst) {
    __shared__ float s_nf4[16], s_e2m1[8];
    if (threadIdx.x < 16) s_nf4[threadIdx.x] = c_nf4[threadIdx.x];
    if (threadIdx.x < 8) s_e2m1[threadIdx.x] = c_e2m1[threadIdx.x];
    __syncthreads();
    const size_t total = (size_t)w.rows * (size_t)w.cols, step = VEC ? 8 : 1;
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * step; i < total;
         i += (size_t)gridDim.x * blockDim.x * step) {
        if (VEC) {
            float v[8];
            decode8<FMT>(w, s_nf4, s_e2m1, i, v);
            store8(dst + i, v);
        } else {
            store1(dst + i, FMT == SOTTO_WFMT_F32 ? ((const float *)w.data)[i] : bf16(((const uint16_t *)w.data)[i]));
        }
    }
}

__global__ void f32_to_bf16_k(const float *__restrict__ x, uint16_t *__restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = to_bf16(x[i]);
}

static unsigned grid_for(size_t work) {
    size_t g = (work + 255) / 256;
    return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}


extern "C" int sotto_cuda_f32_to_bf16(const float *x, uint16_t *y, size_t n, sotto_cuda_stream stream,
                                      sotto_err *err) {
    if (!n) return SOTTO_OK;
    f32_to_bf16_k<<<grid_for(n), 256, 0, stream>>>(x, y, n);
    return launched("f32_to_bf16 launch", err);
}

extern "C" const uint16_t *sotto_cuda_wmat_bf16(const sotto_cuda_wmat *w) {
    return w->fmt == SOTTO_WFMT_BF16 ? (const uint16_t *)w->data : NULL;
}

extern "C" int sotto_cuda_wmat_rows(const sotto_cuda_wmat *w) { return w->rows; }
extern "C" int sotto_cuda_wmat_cols(const sotto_cuda_wmat *w) { return w->cols; }
extern "C" sotto_wfmt sotto_cuda_wmat_fmt(const sotto_cuda_wmat *w) { return w->fmt; }
extern "C" const float *sotto_cuda_wmat_f32(const sotto_cuda_wmat *w) {
    return w->fmt == SOTTO_WFMT_F32 ? (const float *)w->data : NULL;
}

template <typename T> struct DequantLaunch { // T: float, or uint16_t for bf16
    WDev d;
    T *dst;
    dim3 grid;
    cudaStream_t stream;
    template <int FMT, bool VEC> void run() { dequant_k<FMT, VEC, T><<<grid, 256, 0, stream>>>(d, dst); }
};

template <typename T>
static int dequant_launch(const sotto_cuda_wmat *w, T *dst, cudaStream_t stream, sotto_err *err) {
    const bool vec = w->cols % 8 == 0;
    DequantLaunch<T> l = {{w->data, w->scales, w->rows, w->cols, w->global_scale}, dst,
                          dim3(grid_for((size_t)w->rows * w->cols / (vec ? 8 : 1))), stream};
    if (!by_format(w->fmt, vec, l)) return sotto_err_set(err, SOTTO_E_INVALID, "cuda: unknown weight format");
    return launched("dequant launch", err);
}

extern "C" int sotto_cuda_wmat_dequant(const sotto_cuda_wmat *w, float *dst, sotto_cuda_stream stream,
                                       sotto_err *err) {
    return dequant_launch(w, dst, stream, err);
}

extern "C" int sotto_cuda_wmat_dequant_bf16(const sotto_cuda_wmat *w, uint16_t *dst, sotto_cuda_stream stream,
                                            sotto_err *err) {
    return dequant_launch(w, dst, stream, err);
}

extern "C" int sotto_cuda_linear_async(const sotto_cuda_wmat *w, const float *bias, const float *x, int n,
                                       float *y, sotto_cuda_stream stream, sotto_err *err) {
    return linear_launch(w, bias, x, n, y, 0, stream, err);
}

extern "C" int sotto_cuda_linear_acc_async(const sotto_cuda_wmat *w, const float *bias, const float *x, int n,
                                           float *y, sotto_cuda_stream stream, sotto_err *err) {
    return linear_launch(w, bias, x, n, y, 1, stream, err);
}

extern "C" int sotto_cuda_sync(sotto_cuda_stream stream, sotto_err *err) {
    cudaError_t e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? SOTTO_OK : cuda_fail(err, e, "kernel");
}

extern "C" int sotto_cuda_linear(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                                 sotto_cuda_stream stream, sotto_err *err) {
    int rc = sotto_cuda_linear_async(w, bias, x, n, y, stream, err);
    return rc ? rc : sotto_cuda_sync(stream, err);
}
