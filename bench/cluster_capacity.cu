/*
 * How many thread-block clusters the device places at once when each block needs a whole SM (the
 * FP16/BF16 fused tiles do), for clusters of 1, 2, 3, 4, 6 and 8 blocks: the occupancy calculator's
 * answer (cudaOccupancyMaxActiveClusters) for a kernel with the fused tiles' block sizes and a
 * shared-memory request that leaves room for one block per SM. A split launch whose clusters do
 * not all fit runs a second wave (docs/benchmarks.md, "What limits each layer").
 *
 *   nvcc -O2 -arch=sm_90 -o /tmp/cluster_capacity bench/cluster_capacity.cu && /tmp/cluster_capacity
 */
#include <cstdio>
#include <cuda_runtime.h>

__global__ void oneBlockPerSm(float* out)
{
    extern __shared__ float smem[];
    if (out != nullptr)
        out[threadIdx.x] = smem[threadIdx.x];
}

int main()
{
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess)
    {
        std::fprintf(stderr, "cluster_capacity: no CUDA device (%s)\n", cudaGetErrorString(err));
        return 4;
    }
    size_t const smem = prop.sharedMemPerMultiprocessor / 2 + 1024; // one block per SM
    err = cudaFuncSetAttribute(oneBlockPerSm, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess)
    {
        std::fprintf(stderr, "cluster_capacity: %zu bytes of shared memory refused (%s)\n", smem, cudaGetErrorString(err));
        return 1;
    }
    std::printf("%s, %d SMs, %zu bytes of shared memory per block\n", prop.name, prop.multiProcessorCount, smem);
    std::printf("%8s %8s %18s %16s\n", "threads", "cluster", "clusters at once", "blocks at once");
    for (int threads : {384, 640})
    {
        for (unsigned cluster : {1u, 2u, 3u, 4u, 6u, 8u})
        {
            cudaLaunchAttribute attr = {};
            attr.id = cudaLaunchAttributeClusterDimension;
            attr.val.clusterDim.x = 1;
            attr.val.clusterDim.y = 1;
            attr.val.clusterDim.z = cluster;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(1, 1, cluster);
            cfg.blockDim = dim3(static_cast<unsigned>(threads));
            cfg.dynamicSmemBytes = smem;
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
            int clusters = 0;
            err = cudaOccupancyMaxActiveClusters(&clusters, reinterpret_cast<void const*>(oneBlockPerSm), &cfg);
            if (err != cudaSuccess)
            {
                std::fprintf(stderr, "cluster_capacity: cluster of %u: %s\n", cluster, cudaGetErrorString(err));
                return 1;
            }
            std::printf("%8d %8u %18d %16d\n", threads, cluster, clusters, clusters * static_cast<int>(cluster));
        }
    }
    return 0;
}
