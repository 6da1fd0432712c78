/*
 * dcnconvert: TensorRT-free description of one modulated deformable convolution (DCNv2).
 *
 * Plain C layout (no bool, fixed-width integers) so that ctypes can mirror it
 * (dcnconvert/_core_ctypes.py) and the IPluginV3 glue can fill it from tensor descriptors.
 *
 * Semantics (see docs and dcnconvert/reference.py):
 *   out[n, o, oy, ox] = bias[o] + sum_{c in group(o)} sum_{i<kh, j<kw}
 *       weight[o, c - g0, i, j] * mask[n, dg*kh*kw + k, oy, ox]
 *       * bilinear0(x[n, c], oy*strideH - padH + i*dilationH + offset[n, dg*2*kh*kw + 2k, oy, ox],
 *                            ox*strideW - padW + j*dilationW + offset[n, dg*2*kh*kw + 2k + 1, oy, ox])
 *   with k = i*kw + j, dg = c / (C / deformableGroup); pairs are (h, w).
 */
#ifndef DCN_PARAMS_H
#define DCN_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. DcnParams.dtype: every input and the output of a float layer, and the offset, mask
 * and bias of a quantized one (FLOAT32, FLOAT16 or BFLOAT16). INT8 and FP8E4M3 are the types of a
 * quantized layer's x and weights (DcnParams.quant) and of its output when quantized (outType). */
typedef enum DcnDataType
{
    kDCN_FLOAT32 = 0,
    kDCN_FLOAT16 = 1,
    kDCN_BFLOAT16 = 2,
    kDCN_INT8 = 3,
    kDCN_FP8E4M3 = 4
} DcnDataType;

/* Quantized layers (DcnParams.quant). x holds x_q, the weights w_q, with x = xScale * x_q and
 * w[o] = wScale[o] * w_q[o] (symmetric, per tensor for x and per output channel for the weights).
 * Each sample is formed from the corners x_q and the corner weights (mask times the bilinear
 * weights, in FP32). INT8, where those weights are at least 0 and sum to at most 1.0001 (masks in
 * [0, 1]): in fixed point, weights min(round(65536 w), 65535), the exact sum of their products
 * rounded half up to an integer (always within [-128, 127]). Otherwise (and FP8): in FP16, the
 * weights rounded to FP16, one product and three fused multiply-adds as the FP16 layers sample,
 * rounded to the quantized type (INT8: to nearest even, saturated to [-128, 127]; FP8: E4M3 to
 * nearest even, saturated to +-448). The product with the weights follows; sums
 * in FP32 (INT8: exact INT32; FP8: the sum of one 128-channel chunk on the tensor cores, whose FP8
 * accumulation keeps fewer bits than FP32, or of up to four on the fused kernel's warpgroup tiles
 * of one slice per warpgroup (four on the 64-pixel ones, two on the 32-pixel one), then added in
 * FP32), then
 *   out[o] = xScale * wScale[o] * sum + bias[o],
 * converted to outType (a quantized outType: out / outScale rounded and saturated as above). */
typedef enum DcnQuant
{
    kDCN_QUANT_NONE = 0,
    kDCN_QUANT_INT8 = 1,
    kDCN_QUANT_FP8 = 2 /* FP8 E4M3 (finite, no infinities: E4M3FN) */
} DcnQuant;

/* Status codes returned by the core. */
typedef enum DcnStatus
{
    kDCN_SUCCESS = 0,
    kDCN_INVALID_ARGUMENT = 1, /* params inconsistent or out of range; message explains */
    kDCN_CUDA_ERROR = 2,       /* a CUDA call or launch failed; message names it */
    kDCN_UNSUPPORTED = 3       /* valid but not implemented (e.g. dtype on this arch) */
} DcnStatus;

/* Which forward implementation to use. kDCN_ALGO_AUTO lets the core choose. */
typedef enum DcnAlgo
{
    kDCN_ALGO_AUTO = 0,
    kDCN_ALGO_SIMPLE = 1, /* the reference SIMT kernel; kept as the test reference path */
    kDCN_ALGO_FUSED = 2,  /* the fused tensor-core kernel; kDCN_UNSUPPORTED where it does not apply */
    /* kDCN_ALGO_FUSED_TILE + i + kDCN_ALGO_SPLIT_STEP * (s - 1): the fused kernel with tile
     * configuration i and its K range split s ways, 1 <= s <= kDCN_MAX_SPLITS (benchmarks, tests
     * and tuning only; dcnFusedTileCount() configurations; kDCN_UNSUPPORTED where the tile does not
     * apply or s splits do not fit the workspace of dcnWorkspaceSize).
     * kDCN_ALGO_FUSED_TILE + i + kDCN_ALGO_TAIL_STEP * (t - 1), 2 <= t <= kDCN_MAX_SPLITS: tile i
     * without a K split on the first half of the pixel tiles and with K split t ways on the rest
     * (tests of the split tail that AUTO uses for a partial last wave). */
    kDCN_ALGO_FUSED_TILE = 100,
    kDCN_ALGO_SPLIT_STEP = 1000,
    kDCN_ALGO_TAIL_STEP = 10000,
    kDCN_MAX_SPLITS = 8
} DcnAlgo;

/* Arithmetic of the matrix product for FLOAT32 inputs (FLOAT16/BFLOAT16 ignore it: their products
 * are exact in FP32 and accumulate in FP32 either way). */
typedef enum DcnMath
{
    kDCN_MATH_ACCURATE = 0, /* FP32-class results: 3xTF32 on tensor cores or FP32 on CUDA cores */
    kDCN_MATH_TF32 = 1      /* opt-in: operands rounded to TF32 (10-bit mantissa), FP32 accumulation */
} DcnMath;

/* Memory layout of x (DcnParams.xLayout). */
typedef enum DcnLayout
{
    kDCN_LAYOUT_NCHW = 0, /* x[n][c][h][w] */
    kDCN_LAYOUT_NHWC = 1  /* x[n][h][w][c]: channel-last (TensorRT's kHWC8/kHWC16 for channels divisible by 16, kHWC) */
} DcnLayout;

/* What dcnForward's weight pointer holds (DcnParams.weightLayout). */
typedef enum DcnWeightLayout
{
    kDCN_WEIGHT_OIHW = 0,    /* the weights [cout][c / group][kh][kw] */
    kDCN_WEIGHT_PREPARED = 1 /* dcnPrepareWeights' buffer for these params (the OIHW weights come first) */
} DcnWeightLayout;

typedef struct DcnParams
{
    int64_t n;    /* batch */
    int64_t c;    /* input channels */
    int64_t h;    /* input height */
    int64_t w;    /* input width */
    int64_t cout; /* output channels */
    int64_t ho;   /* output height (must equal the computed one) */
    int64_t wo;   /* output width */
    int32_t kh;
    int32_t kw;
    int32_t strideH;
    int32_t strideW;
    int32_t padH;
    int32_t padW;
    int32_t dilationH;
    int32_t dilationW;
    int32_t group;
    int32_t deformableGroup;
    int32_t withBias; /* 0 or 1 */
    int32_t dtype;    /* DcnDataType */
    int32_t algo;     /* DcnAlgo */
    int32_t math;     /* DcnMath; 0 (kDCN_MATH_ACCURATE) for zero-initialised params */
    int32_t xLayout;      /* DcnLayout; 0 (NCHW) for zero-initialised params */
    int32_t weightLayout; /* DcnWeightLayout; 0 (OIHW) for zero-initialised params */
    /* Quantization (DcnQuant; 0: a float layer, the fields below unused). A quantized layer's OIHW
     * weights are the quantized values (1 byte each) followed, at byte dcnQuantScalesOffset(p), by
     * cout FP32 weight scales: one buffer, also the source of dcnPrepareWeights. */
    int32_t quant;
    int32_t outType; /* DcnDataType of a quantized layer's output: FLOAT32/FLOAT16/BFLOAT16, or the
                        quantized type itself (INT8 for kDCN_QUANT_INT8, FP8E4M3 for FP8) */
    float xScale;    /* > 0, finite */
    float outScale;  /* > 0, finite when outType is quantized; else unused */
} DcnParams;

#ifdef __cplusplus
}
#endif

#endif /* DCN_PARAMS_H */
