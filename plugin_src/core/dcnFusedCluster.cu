/*
 * dcnconvert core: the host side of split-K inside thread-block clusters (dcnFusedCluster.cuh): the
 * process-wide choice between clusters and the reduction kernel (dcnSetSplitReduce) and the cached
 * occupancy queries that clustersPay (dcnFusedLaunch.h) decides with. Internal to plugin_src/core;
 * no TensorRT include.
 */
#include "dcnFused.h"
#include "dcnFusedLaunch.h"

#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <stdint.h>

namespace dcn
{
namespace fused
{

namespace
{
struct OccupancyEntry
{
    void const* func;
    int dev;
    int threads;
    size_t smem;
    unsigned clusterZ;
    int perSm;
    int clusters;
};
constexpr int kOccupancyEntries = 64;
std::mutex gOccupancyMutex;
OccupancyEntry gOccupancy[kOccupancyEntries];
int gOccupancyUsed = 0;
int gOccupancyNext = 0; // the entry a full cache overwrites next
std::atomic<int32_t> gSplitReduce{kSplitReduceAuto};
} // namespace

bool clusterOccupancy(void const* func, int dev, int threads, size_t smem, unsigned clusterZ, int& perSm, int& clusters)
{
    {
        std::lock_guard<std::mutex> lock(gOccupancyMutex);
        for (int i = 0; i < gOccupancyUsed; ++i)
        {
            OccupancyEntry const& e = gOccupancy[i];
            if (e.func == func && e.dev == dev && e.threads == threads && e.smem == smem && e.clusterZ == clusterZ)
            {
                perSm = e.perSm;
                clusters = e.clusters;
                return true;
            }
        }
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(1, 1, clusterZ);
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = clusterZ;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&clusters, func, &cfg) != cudaSuccess
        || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, func, threads, smem) != cudaSuccess)
    {
        (void) cudaGetLastError();
        return false;
    }
    std::lock_guard<std::mutex> lock(gOccupancyMutex);
    int const slot = gOccupancyUsed < kOccupancyEntries ? gOccupancyUsed++ : gOccupancyNext++ % kOccupancyEntries;
    gOccupancy[slot] = OccupancyEntry{func, dev, threads, smem, clusterZ, perSm, clusters};
    return true;
}

int32_t splitReduceMode()
{
    return gSplitReduce.load(std::memory_order_relaxed);
}

void setSplitReduceMode(int32_t mode)
{
    gSplitReduce.store(mode, std::memory_order_relaxed);
}

} // namespace fused
} // namespace dcn
