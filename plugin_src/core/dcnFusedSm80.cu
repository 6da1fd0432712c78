/*
 * dcnconvert core: the instantiation unit of the NCHW, register-weight and cp.async-weight tiles (sm_80 and newer)
 * (dcnFusedUnits.cuh); plugin_src/Makefile compiles it only for the architectures that run them.
 */
#include "dcnFusedLaunchTile.cuh"

namespace dcn
{
namespace fused
{

DcnStatus launchSm80Tile(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    return launchFamily<TileFamily::kSm80>(p, c, a, d, q, stream, msg, msgLen);
}

} // namespace fused
} // namespace dcn
