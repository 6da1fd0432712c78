/*
 * dcnconvert core: what the fused kernels' instantiation units (dcnFusedSm80.cu, dcnFusedSm90.cu,
 * dcnFusedSm90a.cu) and the host side (dcnFused.cu) share. Each unit instantiates the tiles of one
 * family and is compiled only for the architectures that run them (plugin_src/Makefile): the sm_80
 * tiles for sm_80 and newer, the TMA tiles for sm_90 and newer, the warpgroup-MMA tiles for sm_90a.
 * The prep and split-K reduction kernels, which every tile uses, live in dcnFused.cu alone (a
 * kernel template instantiated in two units compiled for different architectures would register
 * one host stub for two modules). Internal to plugin_src/core; no TensorRT include.
 */
#ifndef DCN_FUSED_UNITS_CUH
#define DCN_FUSED_UNITS_CUH

#include "dcnFusedCommon.cuh"
#include "dcnFusedTiles.h"

#include <cuda.h> // CUtensorMap

#include <stddef.h>
#include <stdint.h>

namespace dcn
{
namespace fused
{

enum class TileFamily
{
    kSm80,  // NCHW, register and cp.async weight tiles
    kSm90,  // TMA weight tiles
    kSm90a, // warpgroup-MMA tiles
};

constexpr TileFamily familyOf(TileShape const& t)
{
    return t.wgmma ? TileFamily::kSm90a : t.tmaA ? TileFamily::kSm90 : TileFamily::kSm80;
}

struct Ptrs
{
    void const *x, *offset, *mask, *weight, *bias;
    void* out;
    void* workspace;
};

/* The launch of tile c.tile of one family (dcnFusedSm*.cu); kDCN_UNSUPPORTED for a tile of another. */
DcnStatus launchSm80Tile(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen);
DcnStatus launchSm90Tile(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen);
DcnStatus launchSm90aTile(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen);

/* The tensor map of weights wp ([parts * cout][kg] elements) for the TMA tiles (dcnFused.cu). */
DcnStatus weightMap(CUtensorMap& map, void* wp, DcnParams const& p, int64_t kg, int rows, int parts, char* msg,
    size_t msgLen);

/* One prep pass (dcnPrepKernel, dcnFusedAux.cuh): with xh, x (NCHW) -> xh (NHWC); with wp, the
 * OIHW weights w -> wp in the K order of bk-channel chunks, in weight mode wMode. Either may be
 * null; nothing is launched when both are. With `pdl`, a programmatic dependent launch. */
struct PrepWork
{
    void const* x = nullptr;
    void* xh = nullptr;
    void const* w = nullptr;
    void* wp = nullptr;
    int bk = 32;
    int32_t wMode = 0;
};
DcnStatus launchPrep(DcnParams const& p, PrepWork const& w, bool pdl, cudaStream_t stream, char const* what,
    char* msg, size_t msgLen);

/* The split-K reduction of the partial sums of launch args `at` into out (dcnSplitReduceKernel). */
DcnStatus launchSplitReduce(DcnParams const& p, FusedArgs const& at, float const* partial, void const* bias,
    void* out, bool pdl, int tile, cudaStream_t stream, char* msg, size_t msgLen);

} // namespace fused
} // namespace dcn

#endif // DCN_FUSED_UNITS_CUH
