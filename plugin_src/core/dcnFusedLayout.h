/*
 * dcnconvert core: where the prepared weights put each K order a tile may read, and how a quantized
 * layer's weight buffer is laid out (dcnFusedLayout.cu); the tile table is in dcnFusedTiles.h.
 * Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_LAYOUT_H
#define DCN_FUSED_LAYOUT_H

#include "dcnParams.h"

#include <stddef.h>
#include <stdint.h>

namespace dcn
{
namespace fused
{

struct TileShape; // dcnFusedTiles.h

/* Weight modes of the prep pass (dcnPrepKernel) for the FP32 warpgroup tiles, whose MMAs read TF32
 * bits from shared memory: kWeightTf32 rounds the permuted weights to TF32, kWeightSplit writes
 * their big TF32 parts and, cout * kg elements further, their small parts (3xTF32). Other tiles
 * copy (kWeightCopy). */
constexpr int32_t kWeightCopy = 0;
constexpr int32_t kWeightTf32 = 1;
constexpr int32_t kWeightSplit = 2;

/* The prepared weights (dcnPrepareWeights): the OIHW weights first (the NCHW tiles and the simple
 * kernel read them), then each K order a channel-vectorised tile may read for p: 32-channel chunks,
 * 64-channel chunks (FP16/BF16), and for FP32 the warpgroup tiles' TF32 form (rounded, or split in
 * two parts in 3xTF32); a quantized layer: its OIHW buffer (values and scales, dcnQuantWeightBytes)
 * and 128-channel chunks. A tile reads part weightPartOf(t, p), written in mode weightModeOf(t, p);
 * preparedOffset: its byte offset, SIZE_MAX where p has no such part. */
enum WeightPart : int
{
    kPartOihw,
    kPartK32,
    kPartK64,
    kPartWg32,
    kPartK128,
    kWeightParts
};
int weightPartOf(TileShape const& t, DcnParams const& p);
int32_t weightModeOf(TileShape const& t, DcnParams const& p);
size_t preparedOffset(DcnParams const& p, int part);

/* A quantized layer's weight buffer (dcnQuantScalesOffset, dcnQuantWeightBytes without validation):
 * where its FP32 scales start (the 1-byte values' count rounded up to 16) and its bytes. */
size_t quantScalesOffset(DcnParams const& p);
size_t quantWeightBytes(DcnParams const& p);
size_t preparedBytes(DcnParams const& p);

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_LAYOUT_H
