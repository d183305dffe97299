/* gpu.h - the engine's GPU: the device probe here, and the CUDA backend
 * (backend.h's table, sotto_backend_cuda()) between the engine and the CUDA
 * kernels. Not a public header.
 *
 * engine/gpu_cuda.c implements it when the build found nvcc; gpu_none.c
 * otherwise (the probe then reports that the build has no CUDA, and there
 * is no CUDA backend).
 *
 * A GPU model (sotto_model.be_model) holds a device copy of every weight the
 * encoder and decoder layers read, uploaded in the model's packed formats:
 * 4-bit stays 4-bit, so the GPU never holds a dequantized copy of a 4-bit
 * model. The host copy stays too: the token embedding is looked up there
 * (a few rows per step, uploaded with the activations) and the checkpoint
 * tables are kept for snapshots.
 *
 * A GPU state keeps its cross- and self-attention K/V on the device (the
 * state's K/V fields hold device addresses: backend.h) and the encoder
 * output's device copy in its be_state. Per-thread scratch (device buffers
 * and a cuBLAS handle) hangs off sotto_workspace.be_scratch and is freed
 * with the workspace.
 *
 * All work is queued on the default stream; each call returns once its
 * results are on the host (logits) or queued for the next call (encoder).
 * Errors, including those of kernels queued earlier, come back as SOTTO_E_*
 * codes with a message.
 */
#ifndef SOTTO_GPU_H
#define SOTTO_GPU_H

#include "backend.h"

/* 1 if a GPU can run models (its description in desc); else 0 and why. */
int sotto_gpu_probe(char *desc, size_t desc_sz, char *why, size_t why_sz);

/* Device memory in use (by every process) and in total; SOTTO_E_UNSUPPORTED
 * without a GPU. */
int sotto_gpu_mem_info(size_t *used, size_t *total, sotto_err *err);

/* The models, states and layers on the GPU are the CUDA backend's entry in
 * the backend table (backend.h: sotto_backend_cuda()). */

#endif
