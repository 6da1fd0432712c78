/*
 * dcnconvert core: the instantiation unit of the warpgroup-MMA tiles (sm_90a only)
 * (dcnFusedUnits.cuh); plugin_src/Makefile compiles it only for the architectures that run them.
 */
#include "dcnFusedLaunchTile.cuh"

namespace dcn
{
namespace fused
{

DcnStatus launchSm90aTile(DcnParams const& p, Choice const& c, FusedArgs const& a, Device const& d, Ptrs const& q,
    cudaStream_t stream, char* msg, size_t msgLen)
{
    return launchFamily<TileFamily::kSm90a>(p, c, a, d, q, stream, msg, msgLen);
}

} // namespace fused
} // namespace dcn
